// Barriers: each barrier's count, phase and members, live from the watch stream.
import { h, stackable, formatTime, notice } from './dom.js';
import { liveListing } from './live.js';

export function barriersPage(main) {
  const area = h('div', { 'aria-live': 'polite' }, notice('empty', 'Reading the barriers…'));
  main.append(h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', {}, 'Barriers'),
    h('p', { class: 'subtitle' }, 'Double barriers: members enter until the count is reached, then all pass; then they leave together.'))), area);

  function render(answer) {
    if (!answer.barriers.length) return area.replaceChildren(notice('empty', 'No barriers. One exists while sessions are in it.'));
    area.replaceChildren(h('div', { class: 'table-wrap' }, stackable(h('table', { id: 'barriers-table' },
      h('thead', {}, h('tr', {}, ['Name', 'Count', 'Phase', 'Members'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', {}, answer.barriers.map((b) => h('tr', { 'data-barrier': b.name },
        h('td', { class: 'mono' }, b.name),
        h('td', {}, `${b.members.length} of ${b.count}`),
        h('td', {}, h('span', { class: 'badge' }, b.phase)),
        h('td', {}, h('ul', { class: 'plain' }, b.members.map((m) => h('li', {},
          h('a', { href: '#/sessions/' + m.session }, `session ${m.session}`),
          m.leaving ? ' (leaving)' : '', m.deadline_ms ? ` · waits until ${formatTime(m.deadline_ms)}` : '')))))))))));
  }
  return liveListing(area, { path: '/v1/barriers', spaces: 'barrier,session', render });
}
