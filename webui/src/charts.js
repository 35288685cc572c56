// Time-series charts on uPlot (webui/node_modules/uplot, embedded as vendor/uPlot.esm.js): a
// rolling window of samples, and cell events (view changes) drawn as labelled vertical lines on
// every chart.
import uPlot from './vendor/uPlot.esm.js';
import { h } from './dom.js';

const palette = ['#5b4bdb', '#e0652b', '#15925c', '#c2327a', '#2a86c7', '#8c6d1f'];

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Draws each event {t (seconds), label} as a dashed line across the plot.
function eventsPlugin(events) {
  return {
    hooks: {
      draw: [(u) => {
        const { ctx } = u;
        const { top, height, left, width } = u.bbox;
        ctx.save();
        ctx.strokeStyle = cssVar('--warn');
        ctx.fillStyle = cssVar('--warn');
        ctx.setLineDash([5, 4]);
        ctx.lineWidth = 1.5 * devicePixelRatio;
        ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
        for (const event of events) {
          const x = Math.round(u.valToPos(event.t, 'x', true));
          if (x < left || x > left + width) continue;
          ctx.beginPath();
          ctx.moveTo(x, top);
          ctx.lineTo(x, top + height);
          ctx.stroke();
          // The label beside the line, on its left where it would run off the plot.
          const labelWidth = ctx.measureText(event.label).width;
          const gap = 4 * devicePixelRatio;
          const labelX = x + gap + labelWidth > left + width ? x - gap - labelWidth : x + gap;
          ctx.fillText(event.label, labelX, top + 12 * devicePixelRatio);
        }
        ctx.restore();
      }],
    },
  };
}

// A chart of `series` ([{label, unit}]) with one shared x (unix seconds) over `windowSeconds`.
export class TimeChart {
  // `store` keeps the samples ({times, values}) across mounts of the page, so that leaving the
  // page and coming back keeps the last minutes.
  constructor(container, { title, note, series, events, store = {}, windowSeconds = 300, unit = '' }) {
    this.windowSeconds = windowSeconds;
    store.times ??= [];
    store.values ??= series.map(() => []);
    this.times = store.times;
    this.values = store.values;
    this.element = h('figure', { class: 'chart', 'aria-label': title });
    this.element.append(h('h3', {}, title));
    this.plotArea = h('div', { class: 'plot' });
    this.element.append(this.plotArea);
    if (note) this.element.append(h('figcaption', { class: 'note' }, note));
    container.append(this.element);
    this.options = { events, series, unit, windowSeconds };
    this.plot = this.build();
    // Colours come from the theme: a switch between light and dark draws the chart again.
    this.schemeQuery = matchMedia('(prefers-color-scheme: dark)');
    this.onSchemeChange = () => {
      this.plot.destroy();
      this.plot = this.build();
    };
    this.schemeQuery.addEventListener('change', this.onSchemeChange);
    this.resizeObserver = new ResizeObserver(() => this.plot.setSize({ width: this.width(), height: 190 }));
    this.resizeObserver.observe(this.element);
  }

  build() {
    const { events, series, unit, windowSeconds } = this.options;
    const axis = { stroke: cssVar('--muted'), grid: { stroke: cssVar('--border'), width: 1 }, ticks: { stroke: cssVar('--border') } };
    return new uPlot({
      width: this.width(),
      height: 190,
      plugins: [eventsPlugin(events)],
      // The x axis always spans the whole window, the newest sample at the right edge.
      scales: {
        x: { time: true, range: (u, min, max) => (max === null ? [Date.now() / 1000 - windowSeconds, Date.now() / 1000] : [max - windowSeconds, max]) },
        y: { range: (u, min, max) => [0, Math.max(max ?? 0, 1) * 1.1] },
      },
      axes: [{ ...axis, space: 70, values: (u, ticks) => ticks.map(clockTime) },
        { ...axis, size: 60, values: (u, ticks) => ticks.map((v) => formatTick(v) + unit) }],
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: false,
        value: (u, v) => (v === null || v === undefined ? '–' : formatTick(v) + unit),
      }))],
      cursor: { drag: { x: false, y: false } },
      legend: { live: false },
    }, [this.times, ...this.values], this.plotArea);
  }

  width() {
    return Math.max(this.element.clientWidth - 26, 200);
  }

  // One sample: `t` in seconds, `values` one per series (null: no value, a gap).
  push(t, values) {
    this.times.push(t);
    values.forEach((v, i) => this.values[i].push(v));
    while (this.times.length && this.times[0] < t - this.windowSeconds) {
      this.times.shift();
      for (const column of this.values) column.shift();
    }
    this.plot.setData([this.times, ...this.values]);
  }

  destroy() {
    this.resizeObserver.disconnect();
    this.schemeQuery.removeEventListener('change', this.onSchemeChange);
    this.plot.destroy();
  }
}

function clockTime(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString('en-GB', { hour12: false });
}

function formatTick(v) {
  if (v === null || v === undefined) return '–';
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(1) + 'M';
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(0) + 'k';
  if (Math.abs(v) >= 100 || Number.isInteger(v)) return String(Math.round(v));
  return v.toFixed(v < 1 ? 2 : 1);
}
