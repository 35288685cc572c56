// How the UI puts a name or key in a request's path (webui/src/api.js namePath): so that the
// browser sends it to that name, never to another.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { namePath } from '../../webui/src/api.js';

test('dot segments are not left for the browser to resolve', () => {
  assert.equal(namePath('a/../b'), 'a%2F..%2Fb');
  assert.equal(namePath('./x'), '.%2Fx');
  assert.equal(new URL('/v1/kv/' + namePath('a/../b'), 'http://h').pathname, '/v1/kv/a%2F..%2Fb');
});

test('a name that is only dots is refused, since a browser rewrites it however written', () => {
  assert.throws(() => namePath('..'), /lockctl/);
  assert.throws(() => namePath('.'), /lockctl/);
});

test('slashes, spaces, percent signs and other text are encoded and come back', () => {
  for (const name of ['app/leader', 'a b', '100%', 'ä/ü?#', '..a', 'a..']) {
    const path = new URL('/v1/kv/' + namePath(name), 'http://h').pathname;
    assert.equal(decodeURIComponent(path.slice('/v1/kv/'.length)), name);
  }
});
