#include "harness.h"

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "voltlock/electrode.skel.h"

namespace voltlock::bpf_test {

namespace {

std::string& unavailable_reason_storage()
{
    static std::string reason;
    return reason;
}

void put16be(std::vector<uint8_t>& out, size_t at, uint16_t value)
{
    out[at] = static_cast<uint8_t>(value >> 8);
    out[at + 1] = static_cast<uint8_t>(value);
}

void put32be(std::vector<uint8_t>& out, size_t at, uint32_t value)
{
    for (size_t i = 0; i < 4; i++) out[at + i] = static_cast<uint8_t>(value >> (24 - 8 * i));
}

uint16_t get16be(std::span<const uint8_t> in, size_t at)
{
    return static_cast<uint16_t>((in[at] << 8) | in[at + 1]);
}

uint32_t get32be(std::span<const uint8_t> in, size_t at)
{
    return (uint32_t{in[at]} << 24) | (uint32_t{in[at + 1]} << 16) | (uint32_t{in[at + 2]} << 8) |
           uint32_t{in[at + 3]};
}

// One's-complement sum of big-endian 16-bit words.
uint32_t sum16(std::span<const uint8_t> bytes, uint32_t sum = 0)
{
    size_t i = 0;
    for (; i + 1 < bytes.size(); i += 2) sum += (uint32_t{bytes[i]} << 8) | bytes[i + 1];
    if (i < bytes.size()) sum += uint32_t{bytes[i]} << 8;
    return sum;
}

uint16_t fold(uint32_t sum)
{
    while (sum >> 16) sum = (sum & 0xFFFFu) + (sum >> 16);
    return static_cast<uint16_t>(sum);
}

// Sum of the UDP pseudo-header and the UDP header + payload at `udp` (checksum field included).
uint32_t udp_sum(uint32_t src, uint32_t dst, std::span<const uint8_t> udp)
{
    uint32_t sum = (src >> 16) + (src & 0xFFFFu) + (dst >> 16) + (dst & 0xFFFFu);
    sum += 17u + static_cast<uint32_t>(udp.size());
    return sum16(udp, sum);
}

constexpr size_t eth_bytes = 14;
constexpr size_t ip_bytes = 20;
constexpr size_t udp_bytes = 8;
constexpr size_t headers_bytes = eth_bytes + ip_bytes + udp_bytes;

int map_fd(bpf_map* map) { return bpf_map__fd(map); }

}  // namespace

const std::string& kernel_unavailable_reason() { return unavailable_reason_storage(); }
void set_kernel_unavailable_reason(std::string reason)
{
    unavailable_reason_storage() = std::move(reason);
}
int& kernel_tests_skipped()
{
    static int skipped = 0;
    return skipped;
}

Endpoint replica_endpoint(uint8_t replica, bool loopback)
{
    Endpoint e;
    if (!loopback) {
        e.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(replica + 1)};
        e.ipv4 = 0x0A000001u + replica;  // 10.0.0.(r+1)
    } else {
        e.ipv4 = 0x7F000001u + replica;  // 127.0.0.(r+1); lo's MAC is all zero
    }
    e.port = replication_port;
    return e;
}

vl_peer peer_entry(const Endpoint& endpoint, bool resolved)
{
    vl_peer p{};
    p.ipv4_be = htonl(endpoint.ipv4);
    p.port_be = htons(endpoint.port);
    std::memcpy(p.mac, endpoint.mac.data(), sizeof p.mac);
    p.flags = static_cast<uint8_t>(VL_PEER_CONFIGURED | (resolved ? VL_PEER_RESOLVED : 0));
    return p;
}

std::vector<uint8_t> udp_frame(const Endpoint& from, const Endpoint& to,
                               std::span<const uint8_t> payload, bool udp_checksum)
{
    std::vector<uint8_t> f(headers_bytes + payload.size());
    std::memcpy(&f[0], to.mac.data(), 6);
    std::memcpy(&f[6], from.mac.data(), 6);
    put16be(f, 12, 0x0800);
    const size_t ip = eth_bytes;
    f[ip] = 0x45;
    put16be(f, ip + 2, static_cast<uint16_t>(ip_bytes + udp_bytes + payload.size()));
    put16be(f, ip + 4, 0x1234);  // id
    put16be(f, ip + 6, 0x4000);  // DF
    f[ip + 8] = 64;
    f[ip + 9] = 17;
    put32be(f, ip + 12, from.ipv4);
    put32be(f, ip + 16, to.ipv4);
    put16be(f, ip + 10, static_cast<uint16_t>(~fold(sum16({&f[ip], ip_bytes}))));
    const size_t udp = ip + ip_bytes;
    put16be(f, udp, from.port);
    put16be(f, udp + 2, to.port);
    put16be(f, udp + 4, static_cast<uint16_t>(udp_bytes + payload.size()));
    if (!payload.empty()) std::memcpy(&f[headers_bytes], payload.data(), payload.size());
    if (udp_checksum) {
        uint16_t check =
            static_cast<uint16_t>(~fold(udp_sum(from.ipv4, to.ipv4, {&f[udp], f.size() - udp})));
        put16be(f, udp + 6, check == 0 ? 0xFFFF : check);
    }
    return f;
}

std::vector<uint8_t> message_frame(const Endpoint& from, const Endpoint& to,
                                   const Message& message, uint16_t flags, const CellWire& wire)
{
    const std::vector<uint8_t> payload = encode(message, wire, flags);
    REQUIRE(!payload.empty());
    return udp_frame(from, to, payload);
}

ParsedFrame parse_frame(std::span<const uint8_t> frame)
{
    ParsedFrame p;
    REQUIRE(frame.size() >= headers_bytes);
    CHECK(get16be(frame, 12) == 0x0800);
    std::memcpy(p.dst_mac.data(), &frame[0], 6);
    std::memcpy(p.src_mac.data(), &frame[6], 6);
    const std::span<const uint8_t> ip = frame.subspan(eth_bytes, ip_bytes);
    CHECK(ip[0] == 0x45);
    CHECK(ip[9] == 17);
    p.ip_checksum_ok = fold(sum16(ip)) == 0xFFFF;
    p.ip_total_length = get16be(ip, 2);
    p.src_ip = get32be(ip, 12);
    p.dst_ip = get32be(ip, 16);
    const std::span<const uint8_t> udp = frame.subspan(eth_bytes + ip_bytes);
    p.src_port = get16be(udp, 0);
    p.dst_port = get16be(udp, 2);
    p.udp_length = get16be(udp, 4);
    p.udp_checksum = get16be(udp, 6);
    REQUIRE(p.udp_length >= udp_bytes);
    REQUIRE(p.udp_length <= udp.size());
    p.udp_checksum_ok = p.udp_checksum == 0 ||
                        fold(udp_sum(p.src_ip, p.dst_ip, udp.first(p.udp_length))) == 0xFFFF;
    p.payload.assign(udp.begin() + udp_bytes, udp.begin() + p.udp_length);
    return p;
}

Prepare make_prepare(View view, ReplicaIndex leader, Op op, uint16_t count, Op commit,
                     size_t payload_bytes)
{
    Prepare p{.view = view, .replica = leader, .op = op, .commit = commit};
    for (uint16_t i = 0; i < count; i++) {
        const Op o = op - count + 1 + i;
        const auto fill = static_cast<char>('a' + o % 26);
        p.entries.push_back(Entry{.timestamp_ms = 1000 + o,
                                  .client_id = 7,
                                  .request_number = o,
                                  .payload = Bytes(payload_bytes, fill)});
    }
    return p;
}

// ---- Electrode -------------------------------------------------------------------------------

Electrode::Electrode(const Config& config) : config_(config)
{
    skel_ = electrode_bpf::open();
    REQUIRE_MESSAGE(skel_ != nullptr, "opening the skeleton: " << std::strerror(errno));
    skel_->rodata->cfg_replication_port = replication_port;
    skel_->rodata->cfg_cluster_id = cluster_id;
    skel_->rodata->cfg_replica = config.replica;
    skel_->rodata->cfg_replica_count = config.replica_count;
    skel_->rodata->cfg_quorum_slot_mask = config.quorum_slot_mask;
    if (config.ring_bytes != 0)
        REQUIRE(bpf_map__set_max_entries(skel_->maps.vl_ring, config.ring_bytes) == 0);
    const int err = electrode_bpf::load(skel_);
    REQUIRE_MESSAGE(err == 0, "loading the programs (the verifier's log is above): "
                                  << std::strerror(-err));
    if (config.configure_peers)
        for (uint8_t r = 0; r < config.replica_count; r++)
            set_peer(r, peer_entry(replica_endpoint(r, config.loopback)));
}

Electrode::~Electrode() { electrode_bpf::destroy(skel_); }

int Electrode::xdp_fd() const { return bpf_program__fd(skel_->progs.vl_xdp); }
int Electrode::tc_fd() const { return bpf_program__fd(skel_->progs.vl_tc_egress); }

void Electrode::set_state(const vl_kernel_state& state, uint32_t enabled)
{
    vl_state_value value{};
    value.enabled = enabled;
    value.state = state;
    const uint32_t key = 0;
    REQUIRE(bpf_map_update_elem(map_fd(skel_->maps.vl_state), &key, &value, BPF_F_LOCK) == 0);
}

vl_state_value Electrode::state() const
{
    vl_state_value value{};
    const uint32_t key = 0;
    REQUIRE(bpf_map_lookup_elem_flags(map_fd(skel_->maps.vl_state), &key, &value, BPF_F_LOCK) ==
            0);
    return value;
}

vl_fast_ack_log Electrode::fast_ack_log() const
{
    vl_fast_ack_log log{};
    const uint32_t key = 0;
    REQUIRE(bpf_map_lookup_elem(map_fd(skel_->maps.vl_fast_ack_log), &key, &log) == 0);
    return log;
}

void Electrode::set_fast_ack_log(const vl_fast_ack_log& log)
{
    const uint32_t key = 0;
    REQUIRE(bpf_map_update_elem(map_fd(skel_->maps.vl_fast_ack_log), &key, &log, BPF_ANY) == 0);
}

void Electrode::set_mac_keys(const vl_mac_keys& keys)
{
    const uint32_t zero = 0;
    REQUIRE(bpf_map_update_elem(map_fd(skel_->maps.vl_mac_keys), &zero, &keys, BPF_ANY) == 0);
}

void Electrode::set_peer(uint8_t replica, const vl_peer& peer)
{
    const uint32_t key = replica;
    REQUIRE(bpf_map_update_elem(map_fd(skel_->maps.vl_peers), &key, &peer, BPF_ANY) == 0);
}

vl_peer Electrode::peer(uint8_t replica) const
{
    vl_peer p{};
    const uint32_t key = replica;
    REQUIRE(bpf_map_lookup_elem(map_fd(skel_->maps.vl_peers), &key, &p) == 0);
    return p;
}

vl_quorum_slot Electrode::slot(uint32_t index) const
{
    vl_quorum_slot s{};
    REQUIRE(bpf_map_lookup_elem_flags(map_fd(skel_->maps.vl_quorum_slots), &index, &s,
                                      BPF_F_LOCK) == 0);
    return s;
}

vl_follower_ack Electrode::acked(uint8_t replica) const
{
    vl_follower_ack a{};
    const uint32_t key = replica;
    REQUIRE(bpf_map_lookup_elem_flags(map_fd(skel_->maps.vl_acked_ops), &key, &a, BPF_F_LOCK) ==
            0);
    return a;
}

Stats Electrode::stats() const
{
    const int cpus = libbpf_num_possible_cpus();
    REQUIRE(cpus > 0);
    // One batched lookup for the whole per-CPU array: values are [key][cpu].
    std::vector<uint32_t> keys(VL_STAT_SLOTS);
    std::vector<uint64_t> values(VL_STAT_SLOTS * static_cast<size_t>(cpus));
    uint32_t count = VL_STAT_SLOTS;
    uint32_t out_batch = 0;
    const int err = bpf_map_lookup_batch(map_fd(skel_->maps.vl_stats), nullptr, &out_batch,
                                         keys.data(), values.data(), &count, nullptr);
    REQUIRE_MESSAGE((err == 0 || errno == ENOENT), "vl_stats: " << std::strerror(errno));
    REQUIRE(count == VL_STAT_SLOTS);
    Stats total{};
    for (uint32_t i = 0; i < count; i++)
        for (int cpu = 0; cpu < cpus; cpu++)
            total[keys[i]] += values[i * static_cast<size_t>(cpus) + static_cast<size_t>(cpu)];
    return total;
}

std::vector<std::vector<uint8_t>> Electrode::drain_ring()
{
    std::vector<std::vector<uint8_t>> records;
    auto on_record = [](void* ctx, void* data, size_t size) -> int {
        auto* out = static_cast<std::vector<std::vector<uint8_t>>*>(ctx);
        const auto* bytes = static_cast<const uint8_t*>(data);
        out->emplace_back(bytes, bytes + size);
        return 0;
    };
    ring_buffer* rb = ring_buffer__new(map_fd(skel_->maps.vl_ring), on_record, &records, nullptr);
    REQUIRE(rb != nullptr);
    const int consumed = ring_buffer__consume(rb);
    ring_buffer__free(rb);
    REQUIRE(consumed >= 0);
    return records;
}

void set_test_run(bpf_test_run_opts& opts, std::span<const uint8_t> frame,
                  std::vector<uint8_t>& out)
{
    opts.sz = sizeof opts;
    opts.data_in = frame.data();
    opts.data_size_in = static_cast<uint32_t>(frame.size());
    opts.data_out = out.data();
    opts.data_size_out = static_cast<uint32_t>(out.size());
    opts.repeat = 1;
}

RunResult Electrode::run_xdp(std::span<const uint8_t> frame) const
{
    std::vector<uint8_t> out(frame.size() + 512);
    bpf_test_run_opts opts{};
    set_test_run(opts, frame, out);
    const int err = bpf_prog_test_run_opts(xdp_fd(), &opts);
    REQUIRE_MESSAGE(err == 0, "XDP test run of " << frame.size()
                                                 << " bytes: " << std::strerror(errno));
    out.resize(opts.data_size_out);
    return RunResult{.retval = opts.retval, .out = std::move(out)};
}

RunResult Electrode::run_tc(std::span<const uint8_t> frame, uint32_t mark, uint32_t ifindex,
                           uint32_t gso_size) const
{
    std::vector<uint8_t> out(frame.size() + 512);
    __sk_buff ctx_in{};
    ctx_in.mark = mark;
    ctx_in.ifindex = ifindex;
    ctx_in.gso_size = gso_size;
    ctx_in.gso_segs = gso_size != 0 ? 2 : 0;
    __sk_buff ctx_out{};
    bpf_test_run_opts opts{};
    set_test_run(opts, frame, out);
    opts.ctx_in = &ctx_in;
    opts.ctx_size_in = sizeof ctx_in;
    opts.ctx_out = &ctx_out;
    opts.ctx_size_out = sizeof ctx_out;
    const int err = bpf_prog_test_run_opts(tc_fd(), &opts);
    REQUIRE_MESSAGE(err == 0, "TC test run of " << frame.size()
                                                << " bytes: " << std::strerror(errno));
    out.resize(opts.data_size_out);
    return RunResult{.retval = opts.retval, .out = std::move(out), .mark = ctx_out.mark};
}

vl_kernel_state normal_state(View view, Op last_op, uint8_t self, uint8_t count, bool fast_ack)
{
    vl_kernel_state s{};
    s.version = 1;
    s.view = view;
    s.last_op = last_op;
    s.commit = 0;
    s.cluster_id = cluster_id;
    s.status = VL_STATUS_NORMAL;
    s.replica = self;
    s.leader = static_cast<uint8_t>(view % count);
    s.replica_count = count;
    s.fast_ack = fast_ack && s.leader != self ? 1 : 0;
    return s;
}

// ---- StatsDelta ------------------------------------------------------------------------------

bool is_xdp_exit(uint32_t stat)
{
    return stat <= VL_STAT_XDP_INTERNAL || stat == VL_STAT_XDP_BAD_MAC;
}
bool is_tc_exit(uint32_t stat)
{
    return stat >= VL_STAT_TC_NOT_IPV4 && stat <= VL_STAT_TC_UNRESOLVED;
}

StatsDelta::StatsDelta(const Electrode& electrode)
    : electrode_(electrode), before_(electrode.stats())
{
}

uint64_t StatsDelta::operator[](uint32_t stat) const
{
    return electrode_.stats()[stat] - before_[stat];
}

uint64_t exits_between(const Stats& before, const Stats& after, bool (*is_exit)(uint32_t))
{
    uint64_t n = 0;
    for (uint32_t s = 0; s < VL_STAT_COUNT; s++)
        if (is_exit(s)) n += after[s] - before[s];
    return n;
}

uint64_t StatsDelta::xdp_exits() const
{
    return exits_between(before_, electrode_.stats(), is_xdp_exit);
}

uint64_t StatsDelta::tc_exits() const
{
    return exits_between(before_, electrode_.stats(), is_tc_exit);
}

std::string StatsDelta::describe() const
{
    const Stats now = electrode_.stats();
    std::ostringstream out;
    for (uint32_t s = 0; s < VL_STAT_SLOTS; s++)
        if (now[s] != before_[s]) out << vl_stat_name(s) << "=" << (now[s] - before_[s]) << " ";
    return out.str();
}

// ---- Network namespace -----------------------------------------------------------------------

void set_loopback_up(bool up)
{
    // Clones made by a test run carry no route (a socket's packets on lo do), so they take the
    // input route lookup, which drops 127.0.0.0/8 destinations (route_localnet) and local source
    // addresses (accept_local) as martians.
    for (const char* path : {"/proc/sys/net/ipv4/conf/all/route_localnet",
                             "/proc/sys/net/ipv4/conf/lo/route_localnet",
                             "/proc/sys/net/ipv4/conf/all/accept_local",
                             "/proc/sys/net/ipv4/conf/lo/accept_local"}) {
        FILE* f = std::fopen(path, "w");
        REQUIRE_MESSAGE(f != nullptr, path << ": " << std::strerror(errno));
        std::fputs("1", f);
        std::fclose(f);
    }
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    ifreq req{};
    std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
    REQUIRE(ioctl(fd, SIOCGIFFLAGS, &req) == 0);
    if (up)
        req.ifr_flags = static_cast<short>(req.ifr_flags | IFF_UP);
    else
        req.ifr_flags = static_cast<short>(req.ifr_flags & ~IFF_UP);
    const int rc = ioctl(fd, SIOCSIFFLAGS, &req);
    close(fd);
    REQUIRE_MESSAGE(rc == 0, "setting lo " << (up ? "up" : "down") << ": " << std::strerror(errno));
}

UdpSocket::UdpSocket(const Endpoint& endpoint)
{
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    const int one = 1;
    REQUIRE(setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(endpoint.ipv4);
    addr.sin_port = htons(endpoint.port);
    REQUIRE_MESSAGE(bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0,
                    "bind: " << std::strerror(errno));
}

UdpSocket::~UdpSocket()
{
    if (fd_ >= 0) close(fd_);
}

void UdpSocket::send_to(const Endpoint& to, std::span<const uint8_t> payload) const
{
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(to.ipv4);
    addr.sin_port = htons(to.port);
    const ssize_t sent = sendto(fd_, payload.data(), payload.size(), 0,
                                reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    REQUIRE_MESSAGE(sent == static_cast<ssize_t>(payload.size()),
                    "sendto: " << std::strerror(errno));
}

std::vector<std::vector<uint8_t>> UdpSocket::receive_all(int timeout_ms, size_t expect) const
{
    std::vector<std::vector<uint8_t>> datagrams;
    while (datagrams.size() < expect) {
        pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
        if (poll(&p, 1, timeout_ms) <= 0) break;
        std::vector<uint8_t> buf(65536);
        const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
        if (n < 0) break;
        buf.resize(static_cast<size_t>(n));
        datagrams.push_back(std::move(buf));
    }
    return datagrams;
}

}  // namespace voltlock::bpf_test
