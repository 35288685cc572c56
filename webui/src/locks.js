// Locks: every lock with its mode, holders, generation, lock-delay and FIFO queue of waiters,
// filtered by prefix; #/locks/<name> shows one lock and its history from the watch stream.
import { api, explain, namePath, watch } from './api.js';
import { h, stackable, formatDuration, formatNumber, formatTime, notice } from './dom.js';
import { liveListing } from './live.js';

export function locksPage(main, name) {
  return name ? lockDetail(main, name) : lockList(main);
}

function lockList(main) {
  const filter = h('input', { type: 'search', id: 'lock-filter', placeholder: 'e.g. db/', autocomplete: 'off',
    value: sessionStorage.getItem('lock-filter') || '' });
  const area = h('div', { 'aria-live': 'polite' }, notice('empty', 'Reading the locks…'));
  main.append(h('div', { class: 'page-head' },
    h('div', { class: 'grow' }, h('h1', {}, 'Locks'),
      h('p', { class: 'subtitle' }, 'Every lock the cell knows, live from the watch stream.')),
    h('div', { class: 'filter' }, h('label', { for: 'lock-filter' }, 'Name prefix'), filter)), area);
  let last = null;
  const show = () => last && render(last);
  filter.addEventListener('input', () => {
    sessionStorage.setItem('lock-filter', filter.value);
    show();
  });

  function render(answer) {
    last = answer;
    const locks = answer.locks.filter((l) => l.name.startsWith(filter.value));
    if (!answer.locks.length) return area.replaceChildren(notice('empty', 'No locks yet. A lock appears when a session first acquires it.'));
    if (!locks.length) return area.replaceChildren(notice('empty', `No lock name starts with “${filter.value}”.`));
    area.replaceChildren(h('div', { class: 'table-wrap' }, stackable(h('table', { id: 'locks-table' },
      h('thead', {}, h('tr', {}, ['Name', 'Mode', 'Holders', 'Waiters (FIFO)', 'Generation', 'Lock-delay'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, locks.map((l) => h('tr', { 'data-lock': l.name },
        h('td', { class: 'mono' }, h('a', { href: '#/locks/' + encodeURIComponent(l.name) }, l.name)),
        h('td', {}, l.holders.length ? l.holders[0].mode : 'free'),
        h('td', { class: 'holders' }, l.holders.length ? sessionLinks(l.holders) : '–'),
        h('td', { class: 'waiters' }, l.waiters.length ? sessionLinks(l.waiters) : '–'),
        h('td', { class: 'mono' }, formatNumber(l.generation)),
        h('td', {}, lockDelay(l)))))))));
  }
  return liveListing(area, { path: '/v1/locks', spaces: 'lock,session', render });
}

function sessionLinks(entries) {
  return h('ul', { class: 'plain' }, entries.map((e) =>
    h('li', {}, h('a', { href: '#/sessions/' + e.session }, `session ${e.session}`), e.mode === 'shared' ? ' (shared)' : '')));
}

function lockDelay(lock) {
  const left = lock.delay_until_ms - Date.now();
  return lock.delay_until_ms && left > 0 ? `until ${formatTime(lock.delay_until_ms)} (${formatDuration(left)})` : 'none';
}

function lockDetail(main, name) {
  const stateArea = h('div', { 'aria-live': 'polite' }, notice('empty', 'Reading the lock…'));
  const historyList = h('ol', { class: 'plain history', id: 'lock-history', reversed: true });
  const historyState = h('p', { class: 'subtitle' }, 'Connecting to the watch stream…');
  main.append(h('div', { class: 'page-head' }, h('div', { class: 'grow' },
    h('p', {}, h('a', { href: '#/locks' }, '← All locks')),
    h('h1', { class: 'mono' }, name))),
    stateArea, h('h2', {}, 'History'), historyState, h('div', { class: 'panel' }, historyList));

  let stopped = false;
  let handle = null;
  let reread = null;

  async function readState() {
    try {
      const lock = await api('GET', '/v1/locks/' + namePath(name));
      if (stopped) return;
      stateArea.replaceChildren(h('div', { class: 'panel' },
        h('div', { class: 'meta' },
          h('span', {}, 'Generation ', h('b', {}, formatNumber(lock.generation))),
          h('span', {}, 'Lock-delay ', h('b', {}, lockDelay(lock))),
          h('span', {}, 'Revision ', h('b', {}, formatNumber(lock.revision)))),
        h('h2', {}, 'Holders'),
        lock.holders.length ? stackable(h('table', { id: 'lock-holders' }, h('thead', {}, h('tr', {}, ['Session', 'Mode', 'Generation', 'Granted'].map((t) => h('th', {}, t)))),
          h('tbody', {}, lock.holders.map((x) => h('tr', {}, h('td', {}, h('a', { href: '#/sessions/' + x.session }, `session ${x.session}`)),
            h('td', {}, x.mode), h('td', { class: 'mono' }, x.generation), h('td', {}, formatTime(x.granted_ms)))))))
          : notice('empty', 'Free: nobody holds it.'),
        h('h2', {}, 'Waiting, first in line first'),
        lock.waiters.length ? stackable(h('table', { id: 'lock-waiters' }, h('thead', {}, h('tr', {}, ['Session', 'Mode', 'Waiting since', 'Gives up at'].map((t) => h('th', {}, t)))),
          h('tbody', {}, lock.waiters.map((x) => h('tr', {}, h('td', {}, h('a', { href: '#/sessions/' + x.session }, `session ${x.session}`)),
            h('td', {}, x.mode), h('td', {}, formatTime(x.since_ms)), h('td', {}, formatTime(x.deadline_ms)))))))
          : notice('empty', 'Nobody waits.')));
    } catch (error) {
      if (!stopped) stateArea.replaceChildren(notice('error', explain(error)));
    }
  }

  function startHistory(from) {
    handle = watch(name, { startRevision: from, spaces: 'lock' }, (event) => {
      historyList.prepend(h('li', { class: 'flash' },
        h('b', {}, event.type.replace('lock_', '')), ` · session ${event.session} · ${event.mode}`,
        event.generation ? ` · generation ${event.generation}` : '',
        ` · ${event.cause} · revision ${event.revision}`));
      clearTimeout(reread);
      reread = setTimeout(readState, 150);
    }, ({ state, oldest, error }) => {
      if (state === 'compacted') {
        // The retained history starts later: show what is kept.
        historyState.textContent = `Events before revision ${oldest} are no longer kept.`;
        historyList.replaceChildren();
        startHistory(oldest);
      } else if (state === 'live') {
        historyState.textContent = 'Grants, waits, releases and expiries kept by this replica, newest first; new ones appear as they happen.';
      } else if (state === 'reconnecting') {
        historyState.textContent = 'The watch stream broke off; reconnecting…';
      } else if (state === 'refused') {
        historyState.textContent = `No history: the watch stream was refused: ${explain(error)}.`;
      }
    });
  }

  readState();
  startHistory(1);
  return () => {
    stopped = true;
    clearTimeout(reread);
    if (handle) handle.close();
  };
}
