#include "shell/electrode.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "voltlock/electrode.skel.h"

namespace voltlock {

namespace {

Error bpf_error(const std::string& what, int err)
{
    return Error{err < 0 ? -err : err, "electrode: " + what};
}

// The neighbour table's entry for `ip` on `interface`: its MAC, if the kernel resolved it.
bool neighbour_mac(const std::string& ip, const std::string& interface, uint8_t mac[6])
{
    std::ifstream arp("/proc/net/arp");
    std::string line;
    std::getline(arp, line);  // header
    while (std::getline(arp, line)) {
        std::istringstream fields(line);
        std::string address, hw_type, flags, hw_address, mask, device;
        fields >> address >> hw_type >> flags >> hw_address >> mask >> device;
        if (address != ip || device != interface) continue;
        if ((std::stoul(flags, nullptr, 16) & 0x2) == 0) return false;  // ATF_COM: complete
        unsigned bytes[6];
        if (std::sscanf(hw_address.c_str(), "%x:%x:%x:%x:%x:%x", &bytes[0], &bytes[1], &bytes[2],
                        &bytes[3], &bytes[4], &bytes[5]) != 6)
            return false;
        for (int i = 0; i < 6; i++) mac[i] = static_cast<uint8_t>(bytes[i]);
        return true;
    }
    return false;
}

int on_ring_record(void* context, void* data, size_t size)
{
    const auto* on_record = *static_cast<const std::function<void(std::span<const uint8_t>)>**>(
        context);
    if (on_record) (*on_record)({static_cast<const uint8_t*>(data), size});
    return 0;
}

}  // namespace

Electrode::Electrode(const DaemonConfig& config, uint32_t enabled)
    : config_(config), enabled_(enabled)
{
}

Result<std::unique_ptr<Electrode>> Electrode::start(const DaemonConfig& config, uint32_t enabled)
{
    std::unique_ptr<Electrode> electrode(new Electrode(config, enabled));
    if (auto loaded = electrode->load(); !loaded.ok()) return loaded.error();
    if (auto attached = electrode->attach(); !attached.ok()) return attached.error();
    return electrode;
}

Result<Ok> Electrode::load()
{
    if (config_.interface.empty())
        return Error{0, "electrode: the config names no \"interface\" to attach to"};
    ifindex_ = static_cast<int>(if_nametoindex(config_.interface.c_str()));
    if (ifindex_ == 0) return os_error("electrode: interface " + config_.interface);

    skeleton_ = electrode_bpf::open();
    if (!skeleton_) return os_error("electrode: open the eBPF object");
    skeleton_->rodata->cfg_replication_port = config_.self().udp_port;
    skeleton_->rodata->cfg_cluster_id = config_.cluster_id;
    skeleton_->rodata->cfg_replica = config_.replica;
    skeleton_->rodata->cfg_replica_count = static_cast<uint8_t>(config_.replicas.size());
    skeleton_->rodata->cfg_quorum_slot_mask = VL_QUORUM_SLOTS - 1;
    skeleton_->rodata->cfg_clone_mark = VL_CLONE_MARK;
    if (const int err = electrode_bpf::load(skeleton_); err != 0)
        return bpf_error("load the eBPF programs (privileges, kernel support or the verifier)",
                         err);

    // The keys before attaching, and never again: a program never sees a half-written key.
    const uint32_t zero = 0;
    if (bpf_map_update_elem(bpf_map__fd(skeleton_->maps.vl_mac_keys), &zero,
                            &config_.replication_keys, BPF_ANY) != 0)
        return os_error("electrode: write the replication keys map");

    for (uint32_t r = 0; r < config_.replicas.size(); r++) {
        vl_peer peer{};
        inet_pton(AF_INET, config_.replicas[r].ip.c_str(), &peer.ipv4_be);
        peer.port_be = htons(config_.replicas[r].udp_port);
        peer.flags = VL_PEER_CONFIGURED;
        bpf_map_update_elem(bpf_map__fd(skeleton_->maps.vl_peers), &r, &peer, BPF_ANY);
    }
    refresh_peers();

    ring_ = ring_buffer__new(bpf_map__fd(skeleton_->maps.vl_ring), on_ring_record, &on_record_,
                             nullptr);
    if (!ring_) return os_error("electrode: ring buffer");
    // Until the core's first record, every fast path is off.
    return write_state(vl_kernel_state{});
}

Result<Ok> Electrode::attach()
{
    const int xdp_fd = bpf_program__fd(skeleton_->progs.vl_xdp);
    LIBBPF_OPTS(bpf_link_create_opts, native, .flags = XDP_FLAGS_DRV_MODE);
    xdp_link_fd_ = bpf_link_create(xdp_fd, ifindex_, BPF_XDP, &native);
    xdp_native_ = xdp_link_fd_ >= 0;
    if (!xdp_native_) {
        LIBBPF_OPTS(bpf_link_create_opts, generic, .flags = XDP_FLAGS_SKB_MODE);
        xdp_link_fd_ = bpf_link_create(xdp_fd, ifindex_, BPF_XDP, &generic);
        if (xdp_link_fd_ < 0) return bpf_error("attach XDP to " + config_.interface, errno);
    }

    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
    const int created = bpf_tc_hook_create(&hook);
    if (created != 0 && created != -EEXIST)
        return bpf_error("create the clsact qdisc on " + config_.interface, created);
    tc_hook_created_ = created == 0;
    LIBBPF_OPTS(bpf_tc_opts, tc, .prog_fd = bpf_program__fd(skeleton_->progs.vl_tc_egress),
                .flags = BPF_TC_F_REPLACE,  // a crashed predecessor's filter is replaced
                .handle = 1, .priority = 1);
    if (const int err = bpf_tc_attach(&hook, &tc); err != 0)
        return bpf_error("attach TC egress to " + config_.interface, err);
    tc_attached_ = true;
    return Ok{};
}

void Electrode::detach()
{
    if (tc_attached_) {
        LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex_, .attach_point = BPF_TC_EGRESS);
        LIBBPF_OPTS(bpf_tc_opts, tc, .handle = 1, .priority = 1);
        bpf_tc_detach(&hook, &tc);
        if (tc_hook_created_) bpf_tc_hook_destroy(&hook);
        tc_attached_ = false;
    }
    if (xdp_link_fd_ >= 0) {
        ::close(xdp_link_fd_);
        xdp_link_fd_ = -1;
    }
}

Electrode::~Electrode()
{
    detach();
    if (ring_) ring_buffer__free(ring_);
    if (skeleton_) electrode_bpf::destroy(skeleton_);
}

Result<Ok> Electrode::write_state(const vl_kernel_state& state)
{
    vl_state_value value{};
    value.enabled = enabled_;
    value.state = state;
    const uint32_t key = 0;
    if (bpf_map_update_elem(bpf_map__fd(skeleton_->maps.vl_state), &key, &value, BPF_F_LOCK) != 0)
        return os_error("electrode: write the kernel state");
    last_state_ = state;
    return Ok{};
}

int Electrode::ring_fd() const { return ring_buffer__epoll_fd(ring_); }

void Electrode::consume(const std::function<void(std::span<const uint8_t>)>& on_record)
{
    on_record_ = &on_record;
    ring_buffer__consume(ring_);
    on_record_ = nullptr;
}

bool Electrode::refresh_peers()
{
    // The neighbour table knows a peer's MAC once traffic to it was resolved; on loopback every
    // MAC is zero and always "resolved".
    const bool loopback = config_.interface == "lo";
    bool all = true;
    for (uint32_t r = 0; r < config_.replicas.size(); r++) {
        if (r == config_.replica) continue;
        vl_peer peer{};
        const int fd = bpf_map__fd(skeleton_->maps.vl_peers);
        if (bpf_map_lookup_elem(fd, &r, &peer) != 0) return false;
        uint8_t mac[6] = {};
        const bool resolved = loopback || neighbour_mac(config_.replicas[r].ip, config_.interface,
                                                        mac);
        all = all && resolved;
        const uint8_t flags = VL_PEER_CONFIGURED | (resolved ? VL_PEER_RESOLVED : 0);
        if (peer.flags == flags && std::memcmp(peer.mac, mac, 6) == 0) continue;
        peer.flags = flags;
        std::memcpy(peer.mac, mac, 6);
        bpf_map_update_elem(fd, &r, &peer, BPF_ANY);
    }
    peers_resolved_ = all;
    return all;
}

bool Electrode::can_broadcast() const
{
    return (enabled_ & VL_FAST_PATH_BROADCAST) && peers_resolved_;
}

std::vector<vl_follower_ack> Electrode::acked_ops() const
{
    std::vector<vl_follower_ack> acked(config_.replicas.size());
    for (uint32_t r = 0; r < acked.size(); r++)
        bpf_map_lookup_elem_flags(bpf_map__fd(skeleton_->maps.vl_acked_ops), &r, &acked[r],
                                  BPF_F_LOCK);
    return acked;
}

nlohmann::json Electrode::counters() const
{
    const int cpus = libbpf_num_possible_cpus();
    std::vector<uint64_t> per_cpu(cpus > 0 ? static_cast<size_t>(cpus) : 1);
    nlohmann::json counters = nlohmann::json::object();
    for (uint32_t stat = 0; stat < VL_STAT_COUNT; stat++) {
        if (bpf_map_lookup_elem(bpf_map__fd(skeleton_->maps.vl_stats), &stat, per_cpu.data()))
            continue;
        uint64_t total = 0;
        for (uint64_t v : per_cpu) total += v;
        counters[vl_stat_name(stat)] = total;
    }
    return counters;
}

nlohmann::json Electrode::status() const
{
    nlohmann::json acked = nlohmann::json::array();
    for (const vl_follower_ack& ack : acked_ops())
        acked.push_back({{"view", ack.view}, {"op", ack.op}});
    vl_fast_ack_log log{};
    const uint32_t key = 0;
    bpf_map_lookup_elem(bpf_map__fd(skeleton_->maps.vl_fast_ack_log), &key, &log);
    return {{"interface", config_.interface},
            {"xdp_mode", xdp_native_ ? "native" : "generic"},
            {"fast_paths", fast_paths_name(enabled_)},
            {"peers_resolved", peers_resolved_},
            {"kernel_fast_ack", {{"view", log.view}, {"last_op", log.last_op}}},
            {"acked_ops", acked},
            {"counters", counters()}};
}

}  // namespace voltlock
