// TLS on the HTTP API and on the replicas' HTTP to each other (docs/security-tls.md), with
// GnuTLS, the library libmicrohttpd is built on in Debian: the server's certificate and key as
// loaded for handshakes (reloaded on SIGHUP), the client-certificate check of mTLS, what
// `--check-config` finds wrong with the files, and the cell CA and replica certificates that
// `voltlockd init-cell` writes.
#pragma once

#include <gnutls/abstract.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shell/config.h"
#include "shell/result.h"

namespace voltlock {

// TLS 1.2 and 1.3 only; forward-secret key exchange and AEAD ciphers only (no CBC, no RSA key
// transport, no SHA-1 signatures).
inline constexpr const char* kTlsPriorities =
    "SECURE128:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-256-GCM:+AES-128-GCM:"
    "+CHACHA20-POLY1305:-KX-ALL:+ECDHE-ECDSA:+ECDHE-RSA:-SIGN-RSA-SHA1:-SIGN-ECDSA-SHA1:"
    "%SERVER_PRECEDENCE";

// A certificate chain and its private key, ready for handshakes. Never changes once loaded: a
// reload loads a new one, and handshakes under way keep the one they started with.
class TlsIdentity {
public:
    static Result<std::shared_ptr<const TlsIdentity>> load(const std::string& cert_file,
                                                           const std::string& key_file);
    ~TlsIdentity();
    TlsIdentity(const TlsIdentity&) = delete;
    TlsIdentity& operator=(const TlsIdentity&) = delete;

    gnutls_pcert_st* chain() const { return chain_.data(); }
    unsigned chain_length() const { return static_cast<unsigned>(chain_.size()); }
    gnutls_privkey_t key() const { return key_; }
    const std::string& description() const { return description_; }  // subject and expiry

private:
    TlsIdentity() = default;
    mutable std::vector<gnutls_pcert_st> chain_;  // GnuTLS takes it non-const
    gnutls_privkey_t key_ = nullptr;
    std::string description_;
};

// The CAs a client certificate must chain to (mTLS).
class TlsClientTrust {
public:
    static Result<std::shared_ptr<const TlsClientTrust>> load(const std::string& ca_file);
    ~TlsClientTrust();
    TlsClientTrust(const TlsClientTrust&) = delete;
    TlsClientTrust& operator=(const TlsClientTrust&) = delete;

    // Why the session's client certificate is refused, or nullopt when it is trusted.
    std::optional<std::string> refusal(gnutls_session_t session) const;

private:
    TlsClientTrust() = default;
    gnutls_x509_trust_list_t list_ = nullptr;
};

// When a TLS file's certificates stop being valid: the earliest notAfter among them (a chain or
// a CA bundle fails with its first certificate to expire), in Unix seconds.
struct CertificateExpiry {
    std::string file;
    int64_t not_after_unix_s = 0;
};
// Each of the config's certificate files (tls_cert_file, tls_ca_file, tls_client_ca_file), once
// each; one that cannot be read or holds no certificate is left out (loading it fails, and
// --check-config names it). Empty when TLS is off.
std::vector<CertificateExpiry> tls_certificate_expiries(const DaemonConfig& config);

// Every problem of the config's TLS files, one per line of --check-config: unreadable, not PEM,
// a key that is not the certificate's, expired or not yet valid, not for this replica's
// address, not signed by tls_ca_file. Empty when TLS is off.
std::vector<ConfigProblem> tls_problems(const DaemonConfig& config);

// A certificate and its key, PEM (the key unencrypted PKCS#8).
struct PemCredentials {
    std::string certificate;
    std::string key;
};
// A new CA (ECDSA P-256) valid for `days`.
Result<PemCredentials> make_tls_ca(const std::string& common_name, unsigned days);
// A certificate signed by `ca`, for TLS servers and clients at `ips` (IPv4), valid for `days`.
Result<PemCredentials> make_tls_certificate(const PemCredentials& ca,
                                            const std::string& common_name,
                                            const std::vector<std::string>& ips, unsigned days);

}  // namespace voltlock
