// A page that shows a listing read from the API and reads it again whenever the watch stream
// says something in its spaces changed (debounced: a burst of events costs one read). A watch the
// cell refuses is said above the listing, which then stays as last read.
import { api, explain, watch } from './api.js';
import { h, formatTime, notice } from './dom.js';

export function liveListing(area, { path, spaces, render }) {
  const streamProblem = h('div', { 'aria-live': 'assertive' });
  area.before(streamProblem);
  let stopped = false;
  let pending = null;
  let reading = false;
  let again = false;
  let handle = null;

  async function read() {
    if (reading) {
      again = true;
      return;
    }
    reading = true;
    try {
      const answer = await api('GET', path);
      if (stopped) return;
      render(answer);
      if (!handle) startWatch(answer.revision + 1);
    } catch (error) {
      if (!stopped) area.replaceChildren(notice('error', explain(error)));
    } finally {
      reading = false;
      if (again && !stopped) {
        again = false;
        read();
      }
    }
  }

  function startWatch(from) {
    handle = watch('', { prefix: true, startRevision: from, spaces }, () => {
      clearTimeout(pending);
      pending = setTimeout(read, 150);
    }, ({ state, error }) => {
      // After a gap the listing is read again rather than trusted.
      if (state === 'compacted') {
        handle = null;
        read();
      } else if (state === 'refused') {
        streamProblem.replaceChildren(notice('error',
          `Not live: the watch stream was refused: ${explain(error)}. What is shown was read at ${formatTime(Date.now())}; reload the page to read it again.`));
      }
    });
  }

  read();
  return () => {
    stopped = true;
    clearTimeout(pending);
    if (handle) handle.close();
  };
}
