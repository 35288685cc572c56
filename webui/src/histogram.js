// Quantiles from the cumulative latency histograms in /v1/status (commit_latency_us).

// The latency below which a fraction `q` of the samples in `counts` (per bucket, bounds in us)
// fell, interpolated inside its bucket, as Prometheus's histogram_quantile does.
export function histogramQuantile(q, boundsUs, counts) {
  const total = counts.reduce((a, b) => a + b, 0);
  if (!total) return null;
  const rank = q * total;
  let seen = 0;
  for (let i = 0; i < counts.length; i++) {
    if (seen + counts[i] >= rank && counts[i] > 0) {
      const lower = i === 0 ? 0 : boundsUs[i - 1];
      const upper = i < boundsUs.length ? boundsUs[i] : boundsUs[boundsUs.length - 1] * 2;
      return lower + (upper - lower) * ((rank - seen) / counts[i]);
    }
    seen += counts[i];
  }
  return boundsUs[boundsUs.length - 1];
}
