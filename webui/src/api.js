// The public HTTP/JSON API (docs/api.md), as the SDKs use it: JSON in and out, errors carrying
// the server's code, and watches as server-sent events read over fetch (EventSource cannot see
// a 410 "compacted" answer, nor pick a start revision after a reconnect).

export class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || 'http_' + status;
    this.details = body.details || {};
  }
}

// With auth on (docs/security-auth.md) the bearer token the sign-in page took: kept in this
// tab's sessionStorage (gone when the tab closes, or on signing out) and sent as a header, never
// in a URL.
const TOKEN_KEY = 'voltlock-token';

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function hasToken() {
  return sessionStorage.getItem(TOKEN_KEY) !== null;
}

function withToken(headers) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  return headers;
}

// A 401: the token sent is forgotten (revoked, expired, or mistyped), unless another was set
// since, and the shell shows the sign-in page (app.js), saying why.
function unauthenticated(message, sentHeaders) {
  const stored = sessionStorage.getItem(TOKEN_KEY);
  if (stored && sentHeaders.Authorization === `Bearer ${stored}`) setToken(null);
  window.dispatchEvent(new CustomEvent('voltlock-unauthenticated', { detail: message }));
}

export async function api(method, path, body, { timeoutMs = 15000 } = {}) {
  const init = { method, headers: withToken({ Accept: 'application/json' }), signal: AbortSignal.timeout(timeoutMs) };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (failure) {
    throw new ApiError(0, {
      code: 'unreachable',
      message: failure.name === 'TimeoutError'
        ? `did not answer within ${timeoutMs / 1000} s`
        : 'does not answer (it may be down, or cut off from this browser)',
    });
  }
  const text = await response.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = { code: 'bad_answer', message: text.slice(0, 200) };
  }
  if (response.status === 401) unauthenticated(json.message, init.headers);
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

// A name or key in a request's path, percent-encoded whole: its '/' as %2F too (the API decodes
// it), or a browser would take a '.' or '..' between slashes for a dot segment and send the
// request to another key ('a/../b' to 'b'). A name that is all '.' or '..' it would rewrite
// however written (%2E too), so that one is refused.
export function namePath(name) {
  if (name === '.' || name === '..')
    throw new Error(`a browser cannot name "${name}" in a URL: read or change it with lockctl or an SDK`);
  return encodeURIComponent(name);
}

// What an operator should read for an error: the cell-level causes first.
export function explain(error) {
  if (!(error instanceof ApiError)) return String(error);
  if (error.code === 'unavailable' || error.code === 'not_leader')
    return 'No leader: the cell has lost its quorum, or a view change is under way. ' + error.message;
  if (error.code === 'unreachable') return `The replica serving this page ${error.message}.`;
  return `${error.message} (${error.code})`;
}

// Reads every page of a listing that answers {<field>: [...], more, next_after, revision}.
export async function listAll(path, field, params = {}) {
  const items = [];
  let after = null;
  for (;;) {
    const query = new URLSearchParams(params);
    if (after !== null) query.set('after', after);
    const page = await api('GET', `${path}?${query}`);
    items.push(...(page[field] || []));
    if (!page.more) return { items, revision: page.revision };
    after = page.next_after;
  }
}

// A watch on `key` (docs/api.md "Watches"). Calls onEvent(event) for each event in revision
// order; reconnects after a failure from the last complete revision + 1, so nothing is missed or
// repeated. onState({state: 'live'|'reconnecting'|'compacted'|'refused', ...}) tells the page
// what it can show. A refusal (401, 403, or an `error` event saying so when a token is revoked or
// a role changes) ends the watch with the ApiError: asking again would be refused the same way,
// once a second, for ever. Returns {close()}.
export function watch(key, { prefix = false, startRevision, spaces } = {}, onEvent, onState = () => {}) {
  let path;
  try {
    path = '/v1/watch/' + namePath(key);
  } catch (error) {
    onState({ state: 'refused', error });
    return { close() {} };
  }
  const controller = new AbortController();
  let nextRevision = startRevision;
  let closed = false;

  async function connect() {
    const params = new URLSearchParams();
    if (prefix) params.set('prefix', 'true');
    if (nextRevision) params.set('start_revision', String(nextRevision));
    if (spaces) params.set('spaces', spaces);
    const headers = withToken({ Accept: 'text/event-stream' });
    const response = await fetch(`${path}?${params}`, {
      signal: controller.signal, headers,
    });
    if (response.status === 401 || response.status === 403) {
      const error = new ApiError(response.status, await response.json());
      if (response.status === 401) unauthenticated(error.message, headers);
      closed = true;
      onState({ state: 'refused', error });
      return;
    }
    if (response.status === 410) {
      const body = await response.json();
      onState({ state: 'compacted', oldest: body.details.oldest_revision });
      closed = true;
      return;
    }
    if (!response.ok) throw new Error(`watch answered HTTP ${response.status}`);
    onState({ state: 'live' });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        handleBlock(block);
      }
    }
  }

  function handleBlock(block) {
    let type = 'message';
    let data = '';
    let id = null;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'event') type = value;
      else if (field === 'data') data += value;
      else if (field === 'id') id = Number(value);
    }
    if (data) {
      const event = JSON.parse(data);
      if (type === 'error') {
        closed = true;
        if (event.code === 'unauthenticated' || event.code === 'permission_denied')
          onState({ state: 'refused', error: new ApiError(event.code === 'unauthenticated' ? 401 : 403, event) });
        else onState({ state: 'compacted', oldest: event.details && event.details.oldest_revision });
        controller.abort();
        return;
      }
      onEvent(event);
    }
    if (id !== null) nextRevision = id + 1;
  }

  (async () => {
    while (!closed) {
      try {
        await connect();
      } catch (failure) {
        if (closed || controller.signal.aborted) return;
      }
      if (closed) return;
      onState({ state: 'reconnecting' });
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  })();

  return {
    close() {
      closed = true;
      controller.abort();
    },
  };
}
