// Links to another replica's UI. The page's own scheme is kept: with TLS on (--tls on) every
// replica serves https on its HTTP port, and an http:// link would not open there.
export function replicaUiUrl(protocol, ip, port) {
  const host = ip.includes(':') ? `[${ip}]` : ip;  // an IPv6 address in a URL is bracketed
  return `${protocol}//${host}:${port}/ui/`;
}
