#include "shell/peer_http.h"

#include <openssl/ssl.h>

namespace voltlock {

std::unique_ptr<httplib::Client> peer_client(const DaemonConfig& config, const PeerAddress& peer)
{
    const std::string host_port = peer.ip + ":" + std::to_string(peer.http_port);
    if (!config.tls()) return std::make_unique<httplib::Client>("http://" + host_port);
    // The files are read here, so a client made after a SIGHUP presents the new certificate.
    auto client = std::make_unique<httplib::Client>("https://" + host_port, config.tls_cert_file,
                                                    config.tls_key_file);
    if (!config.tls_ca_file.empty()) client->set_ca_cert_path(config.tls_ca_file);
    client->enable_server_certificate_verification(true);
    if (SSL_CTX* context = client->ssl_context())
        SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
    return client;
}

}  // namespace voltlock
