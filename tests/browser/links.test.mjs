// The cell page's "Open the UI on this replica" link (webui/src/links.js): the page's own scheme,
// so that a cell with TLS on links to https.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { replicaUiUrl } from '../../webui/src/links.js';

test('a page served over https links to the other replicas over https', () => {
  assert.equal(replicaUiUrl('https:', '10.77.0.11', 7480), 'https://10.77.0.11:7480/ui/');
});

test('a page served over http links over http', () => {
  assert.equal(replicaUiUrl('http:', '10.77.0.11', 7480), 'http://10.77.0.11:7480/ui/');
});

test('an IPv6 address is bracketed', () => {
  assert.equal(replicaUiUrl('https:', 'fd00::2', 7480), 'https://[fd00::2]:7480/ui/');
});
