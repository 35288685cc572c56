// The shell of the UI: a hash router (#/cell, #/locks/<name>, ...) that mounts one page at a time
// and stops the previous one (its timers and watches) first.
import { cellPage } from './cell.js';
import { locksPage } from './locks.js';
import { sessionsPage } from './sessions.js';
import { keysPage } from './keys.js';
import { barriersPage } from './barriers.js';
import { setToken } from './api.js';
import { h } from './dom.js';

const pages = { cell: cellPage, locks: locksPage, sessions: sessionsPage, keys: keysPage, barriers: barriersPage };
const titles = { cell: 'Cell', locks: 'Locks', sessions: 'Sessions', keys: 'Keys', barriers: 'Barriers' };
let stopCurrent = () => {};

function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const slash = hash.indexOf('/');
  const named = slash < 0 ? hash : hash.slice(0, slash);
  const page = pages[named] ? named : 'cell';
  const argument = slash < 0 ? '' : decodeURIComponent(hash.slice(slash + 1));
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

// The cell has auth on and this tab has no token, or one it refused: ask for one. The token
// stays in this tab's sessionStorage; the page it was on is shown again after.
function loginPage(reason) {
  stopCurrent();
  stopCurrent = () => {};
  const main = document.getElementById('main');
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'current-password', required: '' });
  const form = h('form', { class: 'login' },
    h('h1', {}, 'Sign in'),
    h('p', {}, 'This cell needs a token (docs/security-auth.md). ', reason || ''),
    h('label', { for: 'token' }, 'Token'), input,
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    route();
  });
  main.replaceChildren(form);
  document.title = 'Sign in · Voltlock';
  input.focus();
}
window.addEventListener('voltlock-unauthenticated', (event) => {
  if (!document.querySelector('form.login')) loginPage(event.detail);
});

document.getElementById('served-by').textContent = `served by ${location.host}`;
window.addEventListener('hashchange', () => {
  route();
  document.getElementById('main').focus({ preventScroll: true });
});
route();
