#include "shell/tls.h"

#include <arpa/inet.h>
#include <gnutls/crypto.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <fstream>
#include <sstream>

namespace voltlock {

namespace {

// A GnuTLS result as text.
std::string gnutls_why(int code) { return gnutls_strerror(code); }

Result<std::string> read_file(const std::string& path)
{
    std::ifstream file(path, std::ios::binary);
    if (!file) return os_error("cannot read " + path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
}

gnutls_datum_t datum(const std::string& bytes)
{
    return gnutls_datum_t{reinterpret_cast<unsigned char*>(const_cast<char*>(bytes.data())),
                          static_cast<unsigned>(bytes.size())};
}

std::string utc_date(time_t when)
{
    std::tm parts{};
    ::gmtime_r(&when, &parts);
    char text[32] = {};
    std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &parts);
    return text;
}

// The certificates of a PEM file, owned.
struct CertificateList {
    gnutls_x509_crt_t* certs = nullptr;
    unsigned count = 0;
    ~CertificateList()
    {
        for (unsigned i = 0; i < count; i++) gnutls_x509_crt_deinit(certs[i]);
        gnutls_free(certs);
    }
};

Result<Ok> import_certificates(const std::string& pem, CertificateList& out)
{
    const gnutls_datum_t data = datum(pem);
    const int code = gnutls_x509_crt_list_import2(&out.certs, &out.count, &data,
                                                  GNUTLS_X509_FMT_PEM, 0);
    if (code < 0 || out.count == 0)
        return Error{0, "is not a PEM certificate (" + gnutls_why(code) + ")"};
    return Ok{};
}

struct PrivateKey {
    gnutls_privkey_t key = nullptr;
    ~PrivateKey()
    {
        if (key) gnutls_privkey_deinit(key);
    }
};

Result<Ok> import_key(const std::string& pem, PrivateKey& out)
{
    gnutls_privkey_init(&out.key);
    const gnutls_datum_t data = datum(pem);
    if (const int code = gnutls_privkey_import_x509_raw(out.key, &data, GNUTLS_X509_FMT_PEM,
                                                        nullptr, 0);
        code < 0)
        return Error{0, "is not an unencrypted PEM private key (" + gnutls_why(code) + ")"};
    return Ok{};
}

// The SHA-256 key id of a public key, to compare a certificate's with a private key's.
std::optional<std::string> key_id(gnutls_pubkey_t pubkey)
{
    std::array<unsigned char, 32> id{};
    size_t size = id.size();
    if (gnutls_pubkey_get_key_id(pubkey, GNUTLS_KEYID_USE_SHA256, id.data(), &size) < 0)
        return std::nullopt;
    return std::string(reinterpret_cast<const char*>(id.data()), size);
}

bool key_matches(gnutls_x509_crt_t certificate, gnutls_privkey_t key)
{
    gnutls_pubkey_t of_certificate = nullptr, of_key = nullptr;
    gnutls_pubkey_init(&of_certificate);
    gnutls_pubkey_init(&of_key);
    bool same = false;
    if (gnutls_pubkey_import_x509(of_certificate, certificate, 0) >= 0 &&
        gnutls_pubkey_import_privkey(of_key, key, 0, 0) >= 0) {
        const auto a = key_id(of_certificate);
        const auto b = key_id(of_key);
        same = a && b && *a == *b;
    }
    gnutls_pubkey_deinit(of_certificate);
    gnutls_pubkey_deinit(of_key);
    return same;
}

std::string subject(gnutls_x509_crt_t certificate)
{
    gnutls_datum_t dn{};
    if (gnutls_x509_crt_get_dn3(certificate, &dn, 0) < 0) return "?";
    std::string text(reinterpret_cast<const char*>(dn.data), dn.size);
    gnutls_free(dn.data);
    return text;
}

const char* const kRotateFix =
    "issue a new certificate and key for this replica, signed by the cell's CA, and send the "
    "replica SIGHUP (docs/security-tls.md, Rotating certificates)";

}  // namespace

// ---- TlsIdentity --------------------------------------------------------------------------------

Result<std::shared_ptr<const TlsIdentity>> TlsIdentity::load(const std::string& cert_file,
                                                             const std::string& key_file)
{
    auto cert_pem = read_file(cert_file);
    if (!cert_pem.ok()) return Error{0, "tls_cert_file: " + cert_pem.error().message()};
    auto key_pem = read_file(key_file);
    if (!key_pem.ok()) return Error{0, "tls_key_file: " + key_pem.error().message()};
    CertificateList certificates;
    if (auto imported = import_certificates(cert_pem.value(), certificates); !imported.ok())
        return Error{0, "tls_cert_file: " + cert_file + " " + imported.error().context};
    PrivateKey key;
    if (auto imported = import_key(key_pem.value(), key); !imported.ok())
        return Error{0, "tls_key_file: " + key_file + " " + imported.error().context};
    if (!key_matches(certificates.certs[0], key.key))
        return Error{0, "tls_key_file: " + key_file + " is not the key of " + cert_file};

    std::shared_ptr<TlsIdentity> identity(new TlsIdentity());
    identity->chain_.resize(certificates.count);
    for (unsigned i = 0; i < certificates.count; i++)
        if (const int code = gnutls_pcert_import_x509(&identity->chain_[i],
                                                      certificates.certs[i], 0);
            code < 0) {
            identity->chain_.resize(i);
            return Error{0, "tls_cert_file: " + cert_file + ": " + gnutls_why(code)};
        }
    identity->key_ = std::exchange(key.key, nullptr);
    identity->description_ =
        subject(certificates.certs[0]) + ", expires " +
        utc_date(gnutls_x509_crt_get_expiration_time(certificates.certs[0]));
    return std::shared_ptr<const TlsIdentity>(std::move(identity));
}

TlsIdentity::~TlsIdentity()
{
    for (auto& certificate : chain_) gnutls_pcert_deinit(&certificate);
    if (key_) gnutls_privkey_deinit(key_);
}

// ---- TlsClientTrust -----------------------------------------------------------------------------

Result<std::shared_ptr<const TlsClientTrust>> TlsClientTrust::load(const std::string& ca_file)
{
    std::shared_ptr<TlsClientTrust> trust(new TlsClientTrust());
    gnutls_x509_trust_list_init(&trust->list_, 0);
    const int added = gnutls_x509_trust_list_add_trust_file(trust->list_, ca_file.c_str(), nullptr,
                                                            GNUTLS_X509_FMT_PEM, 0, 0);
    if (added <= 0)
        return Error{0, "tls_client_ca_file: " + ca_file + " holds no PEM certificate" +
                            (added < 0 ? " (" + gnutls_why(added) + ")" : "")};
    return std::shared_ptr<const TlsClientTrust>(std::move(trust));
}

TlsClientTrust::~TlsClientTrust()
{
    if (list_) gnutls_x509_trust_list_deinit(list_, 1);
}

std::optional<std::string> TlsClientTrust::refusal(gnutls_session_t session) const
{
    unsigned count = 0;
    const gnutls_datum_t* raw = gnutls_certificate_get_peers(session, &count);
    if (!raw || count == 0) return "the client sent no certificate";
    std::vector<gnutls_x509_crt_t> chain;
    std::optional<std::string> why;
    for (unsigned i = 0; i < count && !why; i++) {
        gnutls_x509_crt_t certificate = nullptr;
        gnutls_x509_crt_init(&certificate);
        chain.push_back(certificate);
        if (gnutls_x509_crt_import(certificate, &raw[i], GNUTLS_X509_FMT_DER) < 0)
            why = "the client's certificate does not parse";
    }
    if (!why) {
        gnutls_typed_vdata_st purpose{};
        purpose.type = GNUTLS_DT_KEY_PURPOSE_OID;
        purpose.data =
            reinterpret_cast<unsigned char*>(const_cast<char*>(GNUTLS_KP_TLS_WWW_CLIENT));
        unsigned status = 0;
        const int code = gnutls_x509_trust_list_verify_crt2(
            list_, chain.data(), static_cast<unsigned>(chain.size()), &purpose, 1, 0, &status,
            nullptr);
        if (code < 0) {
            why = "its certificate could not be checked: " + gnutls_why(code);
        } else if (status != 0) {
            gnutls_datum_t text{};
            gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text, 0);
            why = std::string(reinterpret_cast<const char*>(text.data), text.size);
            gnutls_free(text.data);
        }
    }
    for (gnutls_x509_crt_t certificate : chain) gnutls_x509_crt_deinit(certificate);
    return why;
}

// ---- Expiry (/metrics) --------------------------------------------------------------------------

std::vector<CertificateExpiry> tls_certificate_expiries(const DaemonConfig& config)
{
    std::vector<CertificateExpiry> expiries;
    for (const std::string* file :
         {&config.tls_cert_file, &config.tls_ca_file, &config.tls_client_ca_file}) {
        const bool seen = std::ranges::any_of(
            expiries, [&](const CertificateExpiry& expiry) { return expiry.file == *file; });
        if (file->empty() || seen) continue;
        auto pem = read_file(*file);
        CertificateList certificates;
        if (!pem.ok() || !import_certificates(pem.value(), certificates).ok()) continue;
        time_t earliest = gnutls_x509_crt_get_expiration_time(certificates.certs[0]);
        for (unsigned i = 1; i < certificates.count; i++)
            earliest =
                std::min(earliest, gnutls_x509_crt_get_expiration_time(certificates.certs[i]));
        expiries.push_back({*file, static_cast<int64_t>(earliest)});
    }
    return expiries;
}

// ---- --check-config -----------------------------------------------------------------------------

std::vector<ConfigProblem> tls_problems(const DaemonConfig& config)
{
    std::vector<ConfigProblem> problems;
    if (!config.tls() || config.tls_key_file.empty()) return problems;  // config_problems says
    const auto readable = [&](const char* field,
                              const std::string& path) -> std::optional<std::string> {
        auto text = read_file(path);
        if (text.ok()) return text.value();
        problems.push_back({field, text.error().message(),
                            "check the path, and that the user voltlockd runs as can read it"});
        return std::nullopt;
    };

    CertificateList certificates;
    bool have_certificate = false;
    if (const auto pem = readable("tls_cert_file", config.tls_cert_file)) {
        if (auto imported = import_certificates(*pem, certificates); imported.ok())
            have_certificate = true;
        else
            problems.push_back({"tls_cert_file", config.tls_cert_file + " " +
                                                     imported.error().context,
                                "give the PEM file of this replica's certificate"});
    }
    PrivateKey key;
    bool have_key = false;
    if (const auto pem = readable("tls_key_file", config.tls_key_file)) {
        if (auto imported = import_key(*pem, key); imported.ok())
            have_key = true;
        else
            problems.push_back({"tls_key_file", config.tls_key_file + " " +
                                                    imported.error().context,
                                "give the PEM file of the certificate's private key, "
                                "unencrypted (readable only by voltlockd's user)"});
    }
    if (have_certificate) {
        gnutls_x509_crt_t leaf = certificates.certs[0];
        if (have_key && !key_matches(leaf, key.key))
            problems.push_back({"tls_key_file",
                                config.tls_key_file + " is not the key of " +
                                    config.tls_cert_file,
                                "give the key the certificate was issued for (or a certificate "
                                "issued for this key)"});
        const time_t now = std::time(nullptr);
        const time_t expires = gnutls_x509_crt_get_expiration_time(leaf);
        const time_t starts = gnutls_x509_crt_get_activation_time(leaf);
        if (expires <= now)
            problems.push_back({"tls_cert_file",
                                config.tls_cert_file + " expired on " + utc_date(expires),
                                kRotateFix});
        else if (starts > now)
            problems.push_back({"tls_cert_file",
                                config.tls_cert_file + " is not valid before " +
                                    utc_date(starts) + " (this host's clock is behind?)",
                                "check the clock, or issue a certificate valid from now"});
        in_addr ip{};
        if (config.replica < config.replicas.size() &&
            ::inet_pton(AF_INET, config.self().ip.c_str(), &ip) == 1 &&
            !gnutls_x509_crt_check_ip(leaf, reinterpret_cast<const unsigned char*>(&ip),
                                      sizeof ip, 0))
            problems.push_back({"tls_cert_file",
                                config.tls_cert_file + " does not name this replica's address " +
                                    config.self().ip + " (peers and clients check it)",
                                "issue it with " + config.self().ip +
                                    " as an IP subject alternative name"});
    }
    if (!config.tls_ca_file.empty()) {
        if (const auto pem = readable("tls_ca_file", config.tls_ca_file)) {
            CertificateList authorities;
            if (auto imported = import_certificates(*pem, authorities); !imported.ok()) {
                problems.push_back({"tls_ca_file", config.tls_ca_file + " " +
                                                       imported.error().context,
                                    "give the PEM file of the cell's CA certificate"});
            } else if (have_certificate) {
                gnutls_x509_trust_list_t trust = nullptr;
                gnutls_x509_trust_list_init(&trust, 0);
                gnutls_x509_trust_list_add_cas(trust, authorities.certs, authorities.count, 0);
                unsigned status = 0;
                // Its dates are a problem of their own, above.
                gnutls_x509_trust_list_verify_crt(trust, certificates.certs, certificates.count,
                                                  GNUTLS_VERIFY_DISABLE_TIME_CHECKS, &status,
                                                  nullptr);
                // The trust list now owns the CAs' certificates.
                authorities.count = 0;
                gnutls_x509_trust_list_deinit(trust, 1);
                if (status != 0) {
                    gnutls_datum_t text{};
                    gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &text,
                                                                 0);
                    problems.push_back(
                        {"tls_cert_file",
                         config.tls_cert_file + " is not trusted by tls_ca_file " +
                             config.tls_ca_file + ": " +
                             std::string(reinterpret_cast<const char*>(text.data), text.size),
                         "issue this replica's certificate from the cell's CA, the one in "
                         "tls_ca_file on every replica"});
                    gnutls_free(text.data);
                }
            }
        }
    }
    if (!config.tls_client_ca_file.empty())
        if (const auto pem = readable("tls_client_ca_file", config.tls_client_ca_file)) {
            CertificateList authorities;
            if (auto imported = import_certificates(*pem, authorities); !imported.ok())
                problems.push_back({"tls_client_ca_file",
                                    config.tls_client_ca_file + " " + imported.error().context,
                                    "give the PEM file of the CA that issues client "
                                    "certificates"});
        }
    return problems;
}

// ---- init-cell's certificates -------------------------------------------------------------------

namespace {

struct Certificate {
    gnutls_x509_crt_t crt = nullptr;
    gnutls_x509_privkey_t key = nullptr;
    ~Certificate()
    {
        if (crt) gnutls_x509_crt_deinit(crt);
        if (key) gnutls_x509_privkey_deinit(key);
    }
};

Error generation_error(const std::string& what, int code)
{
    return Error{0, "TLS: cannot " + what + ": " + gnutls_why(code)};
}

#define VL_GNUTLS(what, call)                                         \
    do {                                                              \
        if (const int vl_code = (call); vl_code < 0)                  \
            return generation_error(what, vl_code);                   \
    } while (0)

// A fresh key and a certificate of it for `common_name`, valid for `days`, not yet signed.
Result<Ok> start_certificate(Certificate& out, const std::string& common_name, unsigned days)
{
    VL_GNUTLS("make a key", gnutls_x509_privkey_init(&out.key));
    VL_GNUTLS("make a key",
              gnutls_x509_privkey_generate(out.key, GNUTLS_PK_ECDSA,
                                           GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0));
    VL_GNUTLS("make a certificate", gnutls_x509_crt_init(&out.crt));
    VL_GNUTLS("set the version", gnutls_x509_crt_set_version(out.crt, 3));
    std::array<unsigned char, 16> serial{};
    VL_GNUTLS("draw a serial", gnutls_rnd(GNUTLS_RND_NONCE, serial.data(), serial.size()));
    serial[0] &= 0x7f;  // a positive number
    VL_GNUTLS("set the serial", gnutls_x509_crt_set_serial(out.crt, serial.data(), serial.size()));
    const time_t now = std::time(nullptr);
    // A minute back: a peer whose clock is a little behind accepts it at once.
    VL_GNUTLS("set its dates", gnutls_x509_crt_set_activation_time(out.crt, now - 60));
    VL_GNUTLS("set its dates", gnutls_x509_crt_set_expiration_time(
                                   out.crt, now + static_cast<time_t>(days) * 86'400));
    VL_GNUTLS("set its name",
              gnutls_x509_crt_set_dn_by_oid(out.crt, GNUTLS_OID_X520_COMMON_NAME, 0,
                                            common_name.data(),
                                            static_cast<unsigned>(common_name.size())));
    VL_GNUTLS("set its key", gnutls_x509_crt_set_key(out.crt, out.key));
    std::array<unsigned char, 64> id{};
    size_t id_size = id.size();
    VL_GNUTLS("compute its key id", gnutls_x509_crt_get_key_id(out.crt, 0, id.data(), &id_size));
    VL_GNUTLS("set its key id", gnutls_x509_crt_set_subject_key_id(out.crt, id.data(), id_size));
    return Ok{};
}

Result<PemCredentials> export_pem(const Certificate& certificate)
{
    gnutls_datum_t crt{}, key{};
    VL_GNUTLS("write the certificate",
              gnutls_x509_crt_export2(certificate.crt, GNUTLS_X509_FMT_PEM, &crt));
    PemCredentials out;
    out.certificate.assign(reinterpret_cast<const char*>(crt.data), crt.size);
    gnutls_free(crt.data);
    VL_GNUTLS("write the key", gnutls_x509_privkey_export2_pkcs8(
                                   certificate.key, GNUTLS_X509_FMT_PEM, nullptr,
                                   GNUTLS_PKCS_PLAIN, &key));
    out.key.assign(reinterpret_cast<const char*>(key.data), key.size);
    gnutls_free(key.data);
    return out;
}

}  // namespace

Result<PemCredentials> make_tls_ca(const std::string& common_name, unsigned days)
{
    Certificate ca;
    VL_TRY(start_certificate(ca, common_name, days));
    VL_GNUTLS("mark it a CA", gnutls_x509_crt_set_basic_constraints(ca.crt, 1, 0));
    VL_GNUTLS("set its key usage",
              gnutls_x509_crt_set_key_usage(ca.crt, GNUTLS_KEY_KEY_CERT_SIGN |
                                                        GNUTLS_KEY_CRL_SIGN));
    VL_GNUTLS("sign it", gnutls_x509_crt_sign2(ca.crt, ca.crt, ca.key, GNUTLS_DIG_SHA256, 0));
    return export_pem(ca);
}

Result<PemCredentials> make_tls_certificate(const PemCredentials& ca,
                                            const std::string& common_name,
                                            const std::vector<std::string>& ips, unsigned days)
{
    Certificate issuer;
    const gnutls_datum_t ca_crt = datum(ca.certificate);
    const gnutls_datum_t ca_key = datum(ca.key);
    VL_GNUTLS("read the CA", gnutls_x509_crt_init(&issuer.crt));
    VL_GNUTLS("read the CA", gnutls_x509_crt_import(issuer.crt, &ca_crt, GNUTLS_X509_FMT_PEM));
    VL_GNUTLS("read the CA's key", gnutls_x509_privkey_init(&issuer.key));
    VL_GNUTLS("read the CA's key",
              gnutls_x509_privkey_import(issuer.key, &ca_key, GNUTLS_X509_FMT_PEM));

    Certificate leaf;
    VL_TRY(start_certificate(leaf, common_name, days));
    VL_GNUTLS("mark it not a CA", gnutls_x509_crt_set_basic_constraints(leaf.crt, 0, -1));
    VL_GNUTLS("set its key usage",
              gnutls_x509_crt_set_key_usage(leaf.crt, GNUTLS_KEY_DIGITAL_SIGNATURE));
    for (const char* purpose : {GNUTLS_KP_TLS_WWW_SERVER, GNUTLS_KP_TLS_WWW_CLIENT})
        VL_GNUTLS("set its purposes", gnutls_x509_crt_set_key_purpose_oid(leaf.crt, purpose, 0));
    for (const std::string& ip : ips) {
        in_addr address{};
        if (::inet_pton(AF_INET, ip.c_str(), &address) != 1)
            return Error{0, "TLS: " + ip + " is not an IPv4 address"};
        VL_GNUTLS("name its address",
                  gnutls_x509_crt_set_subject_alt_name(leaf.crt, GNUTLS_SAN_IPADDRESS, &address,
                                                       sizeof address, GNUTLS_FSAN_APPEND));
    }
    std::array<unsigned char, 64> id{};
    size_t id_size = id.size();
    VL_GNUTLS("read the CA's key id",
              gnutls_x509_crt_get_subject_key_id(issuer.crt, id.data(), &id_size, nullptr));
    VL_GNUTLS("set the CA's key id",
              gnutls_x509_crt_set_authority_key_id(leaf.crt, id.data(), id_size));
    VL_GNUTLS("sign it",
              gnutls_x509_crt_sign2(leaf.crt, issuer.crt, issuer.key, GNUTLS_DIG_SHA256, 0));
    return export_pem(leaf);
}

#undef VL_GNUTLS

}  // namespace voltlock
