// The cell page: every replica as a card, the leader marked, and live charts fed once a second
// from GET /v1/cluster/replicas (every replica's /v1/status, fetched by the replica that served
// this page). A replica that does not answer within 0.8 s is shown down at the next poll. What the
// records take against the quota comes from GET /v1/cluster's "api", polled alongside.
import { api, explain } from './api.js';
import { h, formatBytes, formatNumber, formatDuration, notice } from './dom.js';
import { TimeChart } from './charts.js';
import { histogramQuantile } from './histogram.js';
import { replicaUiUrl } from './links.js';

const POLL_MS = 1000;
const FAST_ACKS = ['fa_appended', 'fa_reacked'];
// Counters whose packets go on to user space, each a reason (bpf/include/voltlock/wire.h).
// Packets that are not the protocol's at all (HTTP, ARP) pass too, but are no fast path's miss.
const NOT_OURS = ['xdp_not_ipv4', 'xdp_not_udp', 'xdp_not_our_port'];
const isPassReason = (name) =>
  ((name.startsWith('xdp_') && !NOT_OURS.includes(name)) ||
   (name.startsWith('fa_') && !FAST_ACKS.includes(name)) ||
   ['q_untracked', 'q_invalid', 'q_disabled'].includes(name));

// What the page has seen, kept while the UI is open so that the charts survive a visit to another
// page (which leaves a gap in them).
const seen = { charts: {}, events: [], previous: null, lastAnswered: {}, highestView: null };
const GAP_MS = 3000;
// Where the server's alert (VoltlockNearQuota, deploy/prometheus) warns too.
const NEAR_QUOTA = 0.8;
// As the server's alert VoltlockClockBehindCell.
const CLOCK_BEHIND_MS = 1000;

export function cellPage(main) {
  const banner = h('div', { 'aria-live': 'polite' });
  const summary = h('section', { class: 'summary', 'aria-label': 'Cell summary' });
  const cards = h('section', { class: 'cards', 'aria-label': 'Replicas' });
  const charts = h('section', { class: 'charts', 'aria-label': 'Live charts' });
  const fastPathDetails = h('div');
  main.append(
    h('div', { class: 'page-head' }, h('div', { class: 'grow' }, h('h1', {}, 'Cell'),
      h('p', { class: 'subtitle' }, 'Every replica as the replica serving this page sees it, refreshed every second.'))),
    banner, summary, cards, h('h2', {}, 'Last 5 minutes'), charts, fastPathDetails);

  const { events, lastAnswered } = seen;  // lastAnswered: replica -> when it last answered (ms)
  const chart = (options) => new TimeChart(charts, { events, store: (seen.charts[options.title] ??= {}), ...options });
  let opsChart, latencyChart, lagChart, fastChart;
  let timer = null;
  let stopped = false;

  function ensureCharts(replicaCount) {
    if (opsChart) return;
    opsChart = chart({ title: 'Committed ops/s', series: [{ label: 'ops/s' }],
      note: 'The highest commit number in the cell, per second.' });
    latencyChart = chart({ title: 'Commit latency (ms)', series: [{ label: 'p50' }, { label: 'p99' }],
      note: "Proposal to applied at the leader, from its histogram (/v1/status commit_latency_us), over each second." });
    const followers = [];
    for (let i = 0; i < replicaCount; i++) followers.push({ label: `r${i}` });
    lagChart = chart({ title: 'Follower lag (ops)', series: followers,
      note: "The leader's op minus what each follower acknowledged (the leader is 0)." });
    fastChart = chart({ title: 'Electrode fast paths (per second, all replicas)',
      series: [{ label: 'fast-acks' }, { label: 'clones' }, { label: 'quorums' }, { label: 'to user space' }],
      note: 'Counters from the eBPF maps: fast-acks in XDP, TC broadcast clones, quorums counted in XDP, packets passed up.' });
  }

  async function poll() {
    const started = Date.now();
    try {
      // The records are a detail: without them the cards are still worth showing.
      const [answer, cluster] = await Promise.all([
        api('GET', '/v1/cluster/replicas', undefined, { timeoutMs: 3000 }),
        api('GET', '/v1/cluster', undefined, { timeoutMs: 3000 }).catch(() => null)]);
      if (stopped) return;
      render(answer, cluster && cluster.api, Date.now());
    } catch (error) {
      if (stopped) return;
      banner.replaceChildren(notice('error', explain(error) +
        ' The cards show what it last said. Open the UI on another replica to see the rest of the cell.'));
      for (const card of cards.children) card.classList.add('is-stale');
    }
    if (!stopped) timer = setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
  }

  function leaderOf(replicas) {
    // The view that the replicas in normal status agree on last, and its leader if it answers.
    const normal = replicas.filter((r) => r.reachable && r.status.status === 'normal');
    if (!normal.length) return null;
    const view = Math.max(...normal.map((r) => r.status.view));
    const inView = normal.filter((r) => r.status.view === view);
    const leader = inView[0].status.leader;
    const entry = replicas[leader];
    return entry && entry.reachable && entry.status.view === view && entry.status.status === 'normal' ? entry : null;
  }

  function render(answer, records, now) {
    const replicas = answer.replicas;
    const up = replicas.filter((r) => r.reachable);
    for (const r of up) lastAnswered[r.replica] = now;
    const majority = Math.floor(replicas.length / 2) + 1;
    // A leader without a majority behind it cannot commit anything: it is no leader to show.
    const claimed = leaderOf(replicas);
    const leader = up.length >= majority ? claimed : null;
    const views = up.map((r) => r.status.view);
    const view = views.length ? Math.max(...views) : null;

    const notices = [];
    if (up.length < majority)
      notices.push(notice('error', `No leader: the cell has lost its quorum (${up.length} of ${replicas.length} replicas answer; ${majority} are needed), or the replica serving this page is cut off from the others.`));
    else if (!leader)
      notices.push(notice('warn', 'No leader right now: a view change is under way.'));
    else if (up.length < replicas.length)
      notices.push(notice('warn', `${replicas.length - up.length} of ${replicas.length} replicas do not answer; the cell still has its quorum.`));
    const share = quotaShare(records);
    if (share !== null && share >= 1)
      notices.push(notice('error', `The records have reached the quota (${formatBytes(records.quota_bytes)}): puts, new sessions, acquires and barrier entries are refused with 507 quota_exceeded until keys are deleted or sessions closed.`));
    else if (share !== null && share >= NEAR_QUOTA)
      notices.push(notice('warn', `The records take ${Math.floor(share * 100)}% of the quota (${formatBytes(records.quota_bytes)}). At the quota, puts, new sessions, acquires and barrier entries are refused.`));
    banner.replaceChildren(...notices);

    summary.replaceChildren(
      stat('Leader', leader ? `r${leader.replica}` : 'none'),
      stat('View', view ?? '–'),
      stat('Replicas up', `${up.length} / ${replicas.length}`),
      stat('Commit', formatNumber(leader ? leader.status.commit : null)),
      stat('Cluster id', up.length ? up[0].status.cluster_id : '–'),
      recordsStat(records, share));

    cards.replaceChildren(...replicas.map((r) => card(r, leader, claimed, now)));

    ensureCharts(replicas.length);
    if (seen.highestView !== null && view !== null && view > seen.highestView) {
      events.push({ t: now / 1000, label: `view ${view}` + (leader ? ` (r${leader.replica})` : '') });
      }
    charts.dataset.viewChanges = String(events.length);
    if (view !== null) seen.highestView = Math.max(seen.highestView ?? view, view);
    sample(answer, leader, now);
    seen.previous = { answer, now };
  }

  function stat(label, value) {
    return h('div', {}, h('span', {}, label), h('strong', {}, value));
  }

  // The share of quota_bytes the records take, or null when there is no quota (0) or no answer.
  function quotaShare(records) {
    return records && records.quota_bytes ? records.stored_bytes / records.quota_bytes : null;
  }

  function recordsStat(records, share) {
    if (!records || records.stored_bytes === undefined) return stat('Records', '–');
    const used = formatBytes(records.stored_bytes);
    if (share === null) return stat('Records', `${used} (no quota)`);
    const element = stat('Records', `${used} of ${formatBytes(records.quota_bytes)} (${(share * 100).toFixed(share < 0.1 ? 1 : 0)}%)`);
    element.dataset.quota = share >= 1 ? 'reached' : share >= NEAR_QUOTA ? 'near' : 'below';
    element.title = `${formatNumber(records.keys)} keys, ${formatNumber(records.sessions)} sessions, ${formatNumber(records.locks)} locks, ${formatNumber(records.barriers)} barriers`;
    return element;
  }

  function card(r, leader, claimed, now) {
    const isLeader = leader && leader.replica === r.replica;
    const leadsAlone = !leader && claimed && claimed.replica === r.replica;
    const s = r.status;
    const classes = ['card', isLeader && 'is-leader', !r.reachable && 'is-down',
      r.reachable && (s.status !== 'normal' || leadsAlone) && 'is-changing'].filter(Boolean).join(' ');
    const role = !r.reachable ? h('span', { class: 'badge badge-down' }, 'down')
      : isLeader ? h('span', { class: 'badge badge-leader' }, 'leader')
      : leadsAlone ? h('span', { class: 'badge badge-warn', title: 'It was leader, and has no majority to commit with' }, 'leader without quorum')
      : s.status === 'normal' ? h('span', { class: 'badge' }, 'follower')
      : h('span', { class: 'badge badge-warn' }, s.status.replace('_', ' '));
    const rows = [['Address', `${r.ip}:${r.http_port}`]];
    if (r.reachable) {
      rows.push(['Status', s.status], ['View', s.view], ['Op', formatNumber(s.op)], ['Commit', formatNumber(s.commit)]);
      if (leader && !isLeader) rows.push(['Behind', `${formatNumber(Math.max(0, leader.status.commit - s.commit))} ops`]);
      rows.push(['Electrode', electrodeText(s.electrode)]);
      // Its clock behind the cell's time: it stamps by the cell's, but NTP wants a look.
      if (s.cell_clock_ahead_ms > CLOCK_BEHIND_MS)
        rows.push(['Clock', h('span', { class: 'warn-text', title: "This replica stamps and measures by the cell's time; check NTP on it" },
          `${formatDuration(s.cell_clock_ahead_ms)} behind the cell's time`)]);
      if (!r.self) rows.push(['Answered in', formatDuration(r.answered_us / 1000)]);
    }
    const element = h('article', { class: classes, 'data-replica': r.replica, 'data-state': !r.reachable ? 'down' : isLeader ? 'leader' : s.status,
      'aria-label': `Replica r${r.replica}` },
      h('header', {}, h('h3', {}, `r${r.replica}`), role, r.self ? h('span', { class: 'badge', title: 'This page is served by this replica' }, 'this page') : null),
      h('dl', {}, rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])));
    if (!r.reachable) {
      const since = lastAnswered[r.replica];
      element.append(h('p', { class: 'error' },
        `Not answering${since ? ` for ${formatDuration(now - since)}` : ''}: ${r.error}`));
    }
    if (!r.self && r.reachable)
      element.append(h('footer', {}, h('a', { href: replicaUiUrl(location.protocol, r.ip, r.http_port) }, 'Open the UI on this replica')));
    return element;
  }

  function electrodeText(electrode) {
    if (!electrode || electrode.mode === 'off') return 'off (VR in user space)';
    return `on, ${electrode.xdp_mode} XDP; ${electrode.fast_paths}`;
  }

  function sample(answer, leader, now) {
    const t = now / 1000;
    let previous = seen.previous;
    if (previous && now - previous.now > GAP_MS) {
      // Away from the page (or the replica did not answer): a gap, not a rate over the absence.
      for (const c of [opsChart, latencyChart, lagChart, fastChart]) c.push(previous.now / 1000 + 1, c.values.map(() => null));
      previous = null;
    }
    const before = previous && previous.answer.replicas;
    const seconds = previous ? (now - previous.now) / 1000 : 0;
    const replicas = answer.replicas;

    const commits = replicas.filter((r) => r.reachable).map((r) => r.status.commit);
    const oldCommits = before ? before.filter((r) => r.reachable).map((r) => r.status.commit) : [];
    const opsRate = commits.length && oldCommits.length && seconds > 0
      ? Math.max(0, (Math.max(...commits) - Math.max(...oldCommits)) / seconds) : null;
    opsChart.push(t, [opsRate]);

    let p50 = null;
    let p99 = null;
    if (leader && before && before[leader.replica].reachable) {
      const current = leader.status.commit_latency_us;
      const earlier = before[leader.replica].status.commit_latency_us;
      if (current && earlier && current.count >= earlier.count) {
        // Fewer than before: the leader restarted in between, and the difference means nothing.
        const delta = current.counts.map((c, i) => c - earlier.counts[i]);
        if (delta.every((c) => c >= 0)) {
          const q50 = histogramQuantile(0.5, current.bounds_us, delta);
          const q99 = histogramQuantile(0.99, current.bounds_us, delta);
          p50 = q50 === null ? null : q50 / 1000;
          p99 = q99 === null ? null : q99 / 1000;
        }
      }
    }
    latencyChart.push(t, [p50, p99]);

    lagChart.push(t, replicas.map((r) => {
      if (!leader || !leader.status.acked_ops) return null;
      if (r.replica === leader.replica) return 0;
      const acked = leader.status.acked_ops[r.replica];
      return acked === undefined ? null : Math.max(0, leader.status.op - acked);
    }));

    const rates = [0, 0, 0, 0];
    let measured = false;
    const passTotals = [];
    for (const r of replicas) {
      const counters = r.reachable && r.status.electrode && r.status.electrode.counters;
      if (!counters) continue;
      passTotals.push([r.replica, counters]);
      const old = before && before[r.replica].reachable && before[r.replica].status.electrode &&
        before[r.replica].status.electrode.counters;
      if (!old || seconds <= 0) continue;
      const rate = (names) => Math.max(0, names.reduce((sum, n) => sum + (counters[n] || 0) - (old[n] || 0), 0)) / seconds;
      rates[0] += rate(FAST_ACKS);
      rates[1] += rate(['tc_clones']);
      rates[2] += rate(['q_complete']);
      rates[3] += rate(Object.keys(counters).filter(isPassReason));
      measured = true;
    }
    fastChart.push(t, measured ? rates : [null, null, null, null]);
    renderPassReasons(passTotals);
  }

  function renderPassReasons(passTotals) {
    if (!passTotals.length) {
      fastPathDetails.replaceChildren(notice('empty',
        'Electrode is off on every replica that answers: VR runs in user space, so the kernel keeps no fast-path counters.'));
      return;
    }
    const reasons = new Set();
    for (const [, counters] of passTotals)
      for (const [name, value] of Object.entries(counters)) if (isPassReason(name) && value > 0) reasons.add(name);
    const open = fastPathDetails.querySelector('details')?.open ?? false;
    fastPathDetails.replaceChildren(h('details', { open },
      h('summary', {}, 'Packets passed to user space, by reason (totals since each replica started)'),
      reasons.size ? h('div', { class: 'table-wrap' }, h('table', {},
        h('thead', {}, h('tr', {}, h('th', {}, 'reason'), passTotals.map(([i]) => h('th', {}, `r${i}`)))),
        h('tbody', {}, [...reasons].sort().map((name) => h('tr', {}, h('td', { class: 'mono' }, name),
          passTotals.map(([, counters]) => h('td', { class: 'mono' }, formatNumber(counters[name] || 0))))))))
        : h('p', {}, 'None: every packet the fast paths saw was handled in the kernel.')));
  }

  poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
    for (const c of [opsChart, latencyChart, lagChart, fastChart]) c && c.destroy();
  };
}
