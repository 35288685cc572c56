// The UI's quantile estimate from a latency histogram's bucket counts (webui/src/histogram.js),
// the way its commit-latency chart uses it: counts per bucket of the last second.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { histogramQuantile } from '../../webui/src/histogram.js';

const bounds = [8, 11, 16, 23, 32];

test('no samples: no quantile (a gap in the chart, not a zero)', () => {
  assert.equal(histogramQuantile(0.5, bounds, [0, 0, 0, 0, 0, 0]), null);
});

test('a quantile is interpolated inside the bucket that holds its rank', () => {
  // 10 samples between 11 and 16 us: the median is half-way through that bucket.
  assert.equal(histogramQuantile(0.5, bounds, [0, 0, 10, 0, 0, 0]), 13.5);
  // 90 fast samples and 10 slow ones: p50 among the fast, p99 among the slow.
  const counts = [90, 0, 0, 0, 10, 0];
  assert.ok(histogramQuantile(0.5, bounds, counts) <= 8);
  const p99 = histogramQuantile(0.99, bounds, counts);
  assert.ok(p99 > 23 && p99 <= 32, String(p99));
});

test('samples slower than every bound count in the last bucket, beyond the last bound', () => {
  const p = histogramQuantile(0.99, bounds, [0, 0, 0, 0, 0, 5]);
  assert.ok(p > 32 && p <= 64, String(p));
});
