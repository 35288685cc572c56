// Sessions: every session with its TTL, time left, what it holds and waits for, its barriers and
// ephemeral keys; an operator can close one (after confirming), which releases what it holds.
import { api, explain } from './api.js';
import { h, stackable, formatDuration, formatTime, notice, confirmDialog } from './dom.js';
import { liveListing } from './live.js';

export function sessionsPage(main, selected) {
  const area = h('div', { 'aria-live': 'polite' }, notice('empty', 'Reading the sessions…'));
  const message = h('div', { 'aria-live': 'assertive' });
  main.append(h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', {}, 'Sessions'),
    h('p', { class: 'subtitle' }, 'Clients and their leases, live from the watch stream. Closing a session releases its locks and deletes its ephemeral keys.'))),
  message, area);
  let last = null;

  function timeLeft(s) {
    const deadline = s.lease_deadline_ms || s.deadline_ms;
    return deadline ? formatDuration(Math.max(0, deadline - Date.now())) : '–';
  }

  async function close(s) {
    const holds = s.held_locks.length ? ` It holds ${s.held_locks.join(', ')}, which will be released.` : '';
    const waits = s.waiting_locks.length ? ` Its waits for ${s.waiting_locks.join(', ')} are withdrawn.` : '';
    const barriers = s.barriers.length ? ` It leaves barrier(s) ${s.barriers.join(', ')}.` : '';
    const keys = s.ephemeral_keys.length ? ` Its ${s.ephemeral_keys.length} ephemeral key(s) will be deleted.` : '';
    const ok = await confirmDialog(`Close session ${s.session}?`,
      `The client${s.name ? ` “${s.name}”` : ''} loses its session at once.${holds}${waits}${barriers}${keys}`, 'Close session');
    if (!ok) return;
    try {
      const result = await api('DELETE', `/v1/sessions/${s.session}`);
      message.replaceChildren(notice('ok', `Session ${s.session} closed: ${result.locks_released} lock(s) released, ${result.keys_deleted} key(s) deleted (revision ${result.revision}).`));
    } catch (error) {
      message.replaceChildren(notice('error', `Session ${s.session} was not closed: ${explain(error)}`));
    }
  }

  function list(names, hrefPrefix) {
    if (!names.length) return '–';
    return h('ul', { class: 'plain' }, names.map((n) => h('li', { class: 'mono' },
      hrefPrefix ? h('a', { href: hrefPrefix + encodeURIComponent(n) }, n) : n)));
  }

  function render(answer) {
    last = answer;
    if (!answer.sessions.length) return area.replaceChildren(notice('empty', 'No sessions. Clients open one with POST /v1/sessions.'));
    area.replaceChildren(h('div', { class: 'table-wrap' }, stackable(h('table', { id: 'sessions-table' },
      h('thead', {}, h('tr', {}, ['Session', 'Name', 'TTL', 'Time left', 'Holds', 'Waits for', 'Barriers', 'Ephemeral keys', ''].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, answer.sessions.map((s) => h('tr', { 'data-session': s.session, class: String(s.session) === selected ? 'flash' : null },
        h('td', { class: 'mono' }, s.session),
        h('td', {}, s.name || '–'),
        h('td', {}, formatDuration(s.ttl_ms)),
        h('td', { class: 'time-left', title: `created ${formatTime(s.created_ms)}` }, timeLeft(s)),
        h('td', {}, list(s.held_locks, '#/locks/')),
        h('td', {}, list(s.waiting_locks, '#/locks/')),
        h('td', {}, list(s.barriers, null)),
        h('td', {}, list(s.ephemeral_keys, '#/keys/')),
        h('td', {}, h('button', { class: 'danger', 'aria-label': `Close session ${s.session}`, onclick: () => close(s) }, 'Close')))))))));
  }

  const tick = setInterval(() => {
    if (!last) return;
    for (const s of last.sessions) {
      const cell = area.querySelector(`tr[data-session="${s.session}"] .time-left`);
      if (cell) cell.textContent = timeLeft(s);
    }
  }, 1000);
  const stop = liveListing(area, { path: '/v1/sessions', spaces: 'session,lock,barrier,kv', render });
  return () => {
    clearInterval(tick);
    stop();
  };
}
