// The shell of the UI: a hash router (#/cell, #/locks/<name>, ...) that mounts one page at a time
// and stops the previous one (its timers and watches) first.
import { cellPage } from './cell.js';
import { locksPage } from './locks.js';
import { sessionsPage } from './sessions.js';
import { keysPage } from './keys.js';
import { barriersPage } from './barriers.js';
import { api, explain, hasToken, setToken } from './api.js';
import { h, notice } from './dom.js';

const pages = { cell: cellPage, locks: locksPage, sessions: sessionsPage, keys: keysPage, barriers: barriersPage };
const titles = { cell: 'Cell', locks: 'Locks', sessions: 'Sessions', keys: 'Keys', barriers: 'Barriers' };
let stopCurrent = () => {};
const signOut = document.getElementById('sign-out');

// A name typed into the address bar may hold a '%' that starts no escape ('#/keys/100%'):
// that one is the name as written.
function decodedOrAsIs(text) {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

function route() {
  signOut.hidden = !hasToken();
  const hash = location.hash.replace(/^#\/?/, '');
  const slash = hash.indexOf('/');
  const named = slash < 0 ? hash : hash.slice(0, slash);
  const page = pages[named] ? named : 'cell';
  const argument = slash < 0 ? '' : decodedOrAsIs(hash.slice(slash + 1));
  stopCurrent();
  const main = document.getElementById('main');
  main.replaceChildren();
  for (const link of document.querySelectorAll('.top nav a')) {
    if (link.dataset.page === page) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  document.title = `${titles[page]} · Voltlock`;
  stopCurrent = pages[page](main, argument) || (() => {});
}

// The cell has auth on and this tab has no token, or one it refused: ask for one. A token is
// tried on GET /v1/cluster (which needs only an identity) and kept, in this tab's
// sessionStorage, only if the cell takes it; then the page it was on is shown again.
function loginPage(reason) {
  stopCurrent();
  stopCurrent = () => {};
  signOut.hidden = true;
  const main = document.getElementById('main');
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'current-password', required: '' });
  const problem = h('div', { 'aria-live': 'assertive' });
  const form = h('form', { class: 'login' },
    h('h1', {}, 'Sign in'),
    h('p', {}, 'This cell needs a token (docs/security-auth.md). ', reason || ''),
    h('label', { for: 'token' }, 'Token'), input, problem,
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    setToken(input.value.trim());
    try {
      await api('GET', '/v1/cluster');
    } catch (error) {
      setToken(null);
      problem.replaceChildren(notice('error', error.status === 401
        ? `The cell did not accept that token: ${error.message}. Check it and try again.`
        : explain(error)));
      input.select();
      return;
    }
    route();
  });
  main.replaceChildren(form);
  document.title = 'Sign in · Voltlock';
  input.focus();
}
window.addEventListener('voltlock-unauthenticated', (event) => {
  if (!document.querySelector('form.login')) loginPage(event.detail);
});
// Signing out forgets the tab's whole sessionStorage first: the token, so that nothing the page
// sends while it stops carries it, and what the tab was looking at (the Keys prefix, the Locks
// filter), so that whoever signs in next starts afresh. Stopping the page ends its polls and
// watch streams.
signOut.addEventListener('click', () => {
  sessionStorage.clear();
  loginPage('Signed out.');
});

document.getElementById('served-by').textContent = `served by ${location.host}`;
window.addEventListener('hashchange', () => {
  route();
  document.getElementById('main').focus({ preventScroll: true });
});
route();
