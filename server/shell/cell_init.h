// `voltlockd init-cell`: writes the configs of a new cell, one per replica, and says what to
// copy where. Replica k is named rk: its config is rk.json, installed as /etc/voltlock/rk.json
// and run by the unit voltlockd@rk (deploy/systemd/voltlockd@.service), data in
// /var/lib/voltlock/rk. Every config it writes passes config_problems().
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shell/config.h"

namespace voltlock {

struct CellHost {
    std::string name;  // as given on the command line
    std::string ip;    // its IPv4 address
};

struct CellPlan {
    uint32_t cluster_id = 0;
    std::vector<CellHost> hosts;  // one per replica, in replica order
    ElectrodeMode electrode = ElectrodeMode::off;
    std::string interface;
    Durability durability = Durability::snapshot;
    // The first replica on a host uses these; each further one on the same host the next ports.
    uint16_t udp_port = 7400;
    uint16_t http_port = 7480;
    std::string out_dir;
    // TLS on the API and between replicas (docs/security-tls.md): a cell CA, and a certificate
    // per replica for its address, valid for tls_days.
    bool tls = true;
    unsigned tls_days = 825;
    std::string config_dir = "/etc/voltlock";  // where the configs say the TLS files are
    // Auth on the API (docs/security-auth.md): a token file with one user, `admin`, whose token
    // (admin_token, made by the caller: printed once, stored only hashed) has the admin role, and
    // an empty roles file to add roles to.
    bool auth = true;
    std::string admin_token;
};

extern const char* const init_cell_usage;

// Parses init-cell's arguments (those after "init-cell"). `fresh_cluster_id` is the cell id
// used unless --cluster-id gives one. Errors name the flag and what to do.
Result<CellPlan> parse_init_cell(const std::vector<std::string>& args, uint32_t fresh_cluster_id);

// The configs, as (file name, JSON text), in replica order. An error if they would break a
// config rule (ports that collide, ...).
Result<std::vector<std::pair<std::string, std::string>>> cell_configs(const CellPlan& plan);

// The files of the cell's TLS, as (file name, PEM text): ca.pem and ca-key.pem, and rK.pem and
// rK-key.pem per replica. Empty with TLS off.
Result<std::vector<std::pair<std::string, std::string>>> cell_tls_files(const CellPlan& plan);

// The auth files, as (file name, text): `tokens` (the admin's hashed token) and `roles`. Empty
// with auth off.
std::vector<std::pair<std::string, std::string>> cell_auth_files(const CellPlan& plan);

// Writes the configs (and the TLS and auth files) into plan.out_dir (made if missing), keys
// readable by the owner only. Refuses, writing nothing, if any of the files exists already: a cell
// id is never mixed into another cell's directory.
Result<Ok> write_cell(const CellPlan& plan);

// What to copy to which host, and how to start and check the cell.
std::string cell_instructions(const CellPlan& plan, const std::string& electrode_dropin_path);

}  // namespace voltlock
