// One replica as a process: the pure core, its state machine, a UDP socket and a tick timer on
// the event loop. The node carries out the core's effects in order and decides nothing.
#pragma once

#include <array>
#include <chrono>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/replica.h"
#include "core/ring_records.h"
#include "core/state_machine.h"
#include "shell/config.h"
#include "shell/electrode.h"
#include "shell/event_loop.h"
#include "shell/forked_encoding.h"
#include "shell/latency_histogram.h"
#include "shell/snapshot_transfer.h"
#include "shell/storage.h"
#include "shell/udp_socket.h"

namespace voltlock {

// Message and datagram counts, for /v1/status and the tests that prove what happened.
struct NodeCounters {
    std::array<uint64_t, VL_MSG_TYPE_MAX + 1> messages_in{};
    std::array<uint64_t, VL_MSG_TYPE_MAX + 1> messages_out{};
    std::array<uint64_t, decode_error_count> rejected{};  // by DecodeError
    std::array<uint64_t, ignored_count> ignored{};  // inputs the core did not act on, by reason
    uint64_t unknown_peer = 0;  // a replica message from an address that is not that replica's
    uint64_t unknown_client = 0;  // a reply for a client whose address we do not know
};

// What became of an op proposed through this replica.
struct ProposeOutcome {
    bool committed = false;  // false: this replica is not (or no longer) the leader
    // The state machine's result, when committed. Empty: the request number was used before
    // for another request (another payload), which was answered instead; this one never ran.
    Bytes result;
    std::optional<ReplicaIndex> leader;  // who to ask instead, when known
};

class Node {
public:
    using ProposeDone = std::function<void(const ProposeOutcome&)>;
    using ExecutedListener = std::function<void(const Executed&)>;
    using ReplyListener = std::function<void(const Reply&)>;

    // `storage`: the data directory (null: state in memory only); `restored`: the snapshot
    // `start` restored from it, which the node serves to peers from the start.
    static Result<std::unique_ptr<Node>> create(
        const DaemonConfig& config, Start start, EventLoop& loop,
        std::unique_ptr<Storage> storage = nullptr,
        std::shared_ptr<const ServedSnapshot> restored = {});
    ~Node();
    // A graceful stop (SIGTERM): takes no more requests, makes everything this replica
    // acknowledged durable (Replica's Stop), and returns; the caller exits.
    void stop();

    // Everything below runs on the loop thread.

    // Proposes `payload` through the log as request `request_number` of client `client_id`
    // (VR's client table makes a retry of the same pair execute once). `done` runs once: when
    // the op is committed and applied, or when this replica is not the leader or stops being
    // it before then, or at once with an empty result when another payload waits here under
    // the same pair.
    void propose(ClientId client_id, RequestNumber request_number, Bytes payload,
                 ProposeDone done);
    // Sends `request` to replica `leader` as a client would (§4.1 step 1), from this replica's
    // replication address: the leader's Reply comes back to the listener below. What a follower
    // uses to have the leader propose an op for it.
    void send_request(ReplicaIndex leader, const Request& request);
    // `listener` sees every Reply that reaches this replica from a replica of the cell.
    void on_reply(ReplyListener listener) { reply_listener_ = std::move(listener); }
    // `taker` sees every Request that a replica of the cell sent (its API forwarding for a
    // client) before the core does; a Request it takes (returns true) never reaches the core,
    // and the taker answers it, or not, with answer_request. For requests the API serves at the
    // leader from more than the log (a keepalive: the lease tracker).
    using RequestTaker = std::function<bool(const Request&)>;
    void take_requests(RequestTaker taker) { request_taker_ = std::move(taker); }
    // Sends `reply` to the address its client's latest Request came from.
    void answer_request(const Reply& reply);
    // `listener` sees every entry this replica applies, in op order.
    void on_executed(ExecutedListener listener)
    {
        executed_listeners_.push_back(std::move(listener));
    }
    // `listener` runs when the state machine jumped to a snapshot fetched from a peer.
    void on_snapshot_installed(std::function<void()> listener)
    {
        installed_listeners_.push_back(std::move(listener));
    }
    // The snapshot peers fetch from this replica, if any. Safe from any thread.
    std::shared_ptr<const ServedSnapshot> served_snapshot() const;

    const Replica& replica() const { return replica_; }
    StateMachine& machine() { return *machine_; }
    // The cell's time as this replica reads it (docs/leases.md, "The clock assumption"): its
    // steady_wall_clock_ms(), moved forward by as much as the largest timestamp it has applied
    // was ahead of that clock, as of its last tick. The leader stamps ops by it; waits,
    // lock-delays and token expiries, which count from those stamps, are measured by it. So a
    // replica whose clock is behind the cell's never holds the cell's time still when it leads.
    // Any thread.
    uint64_t cell_clock_ms() const;
    // How far that is ahead of steady_wall_clock_ms(): /v1/status, /v1/cluster and /metrics
    // show it.
    uint64_t cell_clock_ahead_ms() const { return cell_ahead_ms_; }
    const DaemonConfig& config() const { return config_; }
    // The state that /v1/status reports.
    nlohmann::json status() const;
    // The state machine's digest as of the op applied last, which tests compare across
    // replicas, in hex. It reads the whole state on the loop (20 ms at 126,000 keys, 0.3-0.6 s
    // at 600,000: a view change, were it in every status), so it is computed once per applied
    // op, whoever asks, and at most once per loop turn: nullopt when this turn computed one for
    // another op already (ask again). Otherwise a burst of requests, all served in one turn,
    // made a turn that long per request and deposed the leader. Loop thread.
    std::optional<std::string> state_digest();
    // How many times state_digest() read the whole state.
    uint64_t digests_computed() const { return digests_computed_; }
    nlohmann::json storage_status() const;
    // The loop's turn lengths (EventLoop::TurnStats): a stall shows here and in /metrics.
    nlohmann::json event_loop_status() const;

private:
    Node(const DaemonConfig& config, Start start, EventLoop& loop, UdpSocket socket,
         FileDescriptor timer, std::vector<sockaddr_in> peers,
         std::unique_ptr<Electrode> electrode, std::unique_ptr<Storage> storage,
         std::shared_ptr<const ServedSnapshot> restored);

    void on_datagrams();
    void on_timer();
    void on_ring_records();
    void take_ring_records();
    void take_ring_record(std::span<const uint8_t> datagram);
    void deliver_ring_records(bool past_gaps);
    void drain_kernel();
    void feed_kernel_acks();
    void follow_cell_time();
    void broadcast(const Message& message);
    void on_datagram(std::span<const uint8_t> datagram, const sockaddr_in& from);
    // A datagram failed the cell key's MAC: says so once per sender a minute (else only the
    // counter shows a replica started with another cell.key).
    void warn_bad_mac(const sockaddr_in& from);
    void step(const Input& input);
    // For work that arrives on its own (a storage thread's result): the leader sends its
    // partial batch and the socket its queue at once.
    void step_and_flush(const Input& input);
    // At the end of this turn of the loop the leader sends its partial batch, and the socket
    // its queue: the ops proposed in one turn (an HTTP pass's calls) leave in one Prepare, and
    // the Requests and Replies the API queued in one sendmmsg.
    void flush_at_end_of_turn();
    void execute(Effect& effect);
    // Storage: the data directory's writes, and the snapshot transfer.
    void persist(StorageBatch& batch);
    // A snapshot for the writer thread: its bytes at hand, or a child still encoding them.
    struct SnapshotJob {
        Op op = 0;
        std::shared_ptr<const ServedSnapshot> snapshot;  // null while `encoding` runs
        std::optional<ForkedEncoding> encoding;
    };
    void take_own_snapshot(Op op);
    void write_snapshot(Op op, Bytes bytes, bool before_next_effect);
    void queue_for_writer(SnapshotJob job);
    void snapshot_writer_thread();
    void snapshot_written(Op op, const std::shared_ptr<const ServedSnapshot>& snapshot, bool ok);
    void serve(std::shared_ptr<const ServedSnapshot> snapshot);
    void fetch_snapshot_from(const FetchSnapshot& fetch);
    [[noreturn]] void fail_stop(const Error& error);
    void send_message(const sockaddr_in& to, const Message& message, uint16_t flags = 0);
    // A Reply to a replica waits in replies_to_peers_ for send_queued; to a client it is queued.
    void send_reply(const sockaddr_in& to, const Reply& reply);
    // The turn's Replies and Requests to each replica, as few datagrams as carry them, then the
    // socket's queue: every flush of the socket goes through here.
    void send_queued();
    // A Request's sender is where its Reply goes. Of one a follower forwarded, the API may take
    // it (a keepalive: true), else its commit latency counts from its first arrival.
    bool note_request(const Request& request, const sockaddr_in& from, bool from_replica);
    void log_transition(const vl_kernel_state& state);
    void deliver_reply(const Reply& reply);
    void fail_proposals();

    DaemonConfig config_;
    CellWire wire_;  // what every datagram in and out is checked and stamped with
    std::unique_ptr<Electrode> electrode_;  // null: VR runs all in user space
    RingRecords ring_records_;              // acknowledged by the kernel, not yet delivered
    std::vector<Op> kernel_acks_fed_;       // per replica, the op last fed to the core
    uint64_t ticks_ = 0;
    std::atomic<uint64_t> cell_ahead_ms_ = 0;  // written on the loop: follow_cell_time()
    std::unique_ptr<StateMachine> machine_;
    Replica replica_;
    UdpSocket socket_;
    bool flush_pending_ = false;  // flush_at_end_of_turn() has a flush queued
    FileDescriptor timer_;
    std::vector<sockaddr_in> peers_;  // by replica index
    // By replica index, until send_queued.
    std::vector<std::vector<Reply>> replies_to_peers_;
    std::vector<std::vector<Request>> requests_to_peers_;
    // Where each client id's latest Request came from, until a Reply to it leaves.
    std::unordered_map<ClientId, sockaddr_in> clients_;
    std::vector<uint8_t> encode_buffer_;
    vl_kernel_state last_state_{};
    NodeCounters counters_;
    // The core's Stop persisted what it acknowledged (PersistStopped): for the stop's log line.
    bool wrote_clean_stop_ = false;
    // The senders warned of a bad MAC in the minute that began at bad_mac_window_start_ms_.
    std::unordered_set<uint64_t> bad_mac_warned_;
    uint64_t bad_mac_window_start_ms_ = 0;
    // Proposal to applied result, for the ops proposed here (the API's, and those a follower's
    // API forwarded here as Requests): /v1/status's commit_latency_us.
    LatencyHistogram commit_latency_;
    // state_digest()'s: the last digest and the state it is of (the op, and how many times a
    // recovery or snapshot replaced the state), and the loop turn it was computed in.
    std::optional<std::pair<std::pair<Op, uint64_t>, uint64_t>> digest_;
    std::optional<uint64_t> digest_turn_;
    uint64_t digests_computed_ = 0;
    // When each client's latest Request from a follower arrived, until its Reply leaves.
    std::unordered_map<ClientId, std::pair<RequestNumber, std::chrono::steady_clock::time_point>>
        forwarded_arrivals_;
    // The ops proposed here and not yet answered, by client and request number: the CRC-32C of
    // the payload they were proposed with, and who waits for the Reply.
    struct Proposal {
        uint32_t request_crc = 0;
        std::vector<ProposeDone> waiting;
    };
    std::map<std::pair<ClientId, RequestNumber>, Proposal> proposals_;
    std::vector<ExecutedListener> executed_listeners_;
    ReplyListener reply_listener_;
    RequestTaker request_taker_;
    std::vector<std::function<void()>> installed_listeners_;

    // Storage (thread-safe itself). The loop persists the log while the writer thread writes a
    // snapshot; snapshot writes, from either thread, hold snapshot_write_mutex_, never taken by
    // persist(): a snapshot's write lasts a while, and the loop waits only for the chunk of it
    // being written (Storage::write_snapshot).
    EventLoop& loop_;
    std::unique_ptr<Storage> storage_;
    std::mutex snapshot_write_mutex_;
    Op newest_snapshot_written_ = 0;  // under snapshot_write_mutex_
    std::string last_storage_error_;  // loop thread
    mutable std::mutex served_mutex_;
    std::shared_ptr<const ServedSnapshot> served_;
    // Snapshots waiting for the writer thread, oldest first.
    std::mutex writer_mutex_;
    std::condition_variable writer_wakeup_;
    std::deque<SnapshotJob> writer_queue_;
    std::atomic<bool> stopping_ = false;
    std::thread writer_;
    // One snapshot fetch at a time, on its own thread; what it got so far survives a failure.
    std::atomic<bool> fetching_ = false;
    std::thread fetcher_;
    SnapshotDownload download_;  // fetcher thread, while fetching_
};

// The wall clock in milliseconds as read once, at the first call, advanced since by the
// monotonic clock: a step of the system clock after that (`date -s`, NTP's `makestep`) moves
// nothing here, and a slew moves it as it moves the wall clock. What session leases are measured
// on, and what Node::cell_clock_ms() follows (docs/leases.md): a clock stepped forward on the
// leader expired every session at once.
uint64_t steady_wall_clock_ms();
// The monotonic clock in milliseconds (CLOCK_MONOTONIC: never steps; NTP may slew its rate
// within its bound): what the leader lease is measured on (docs/leases.md).
uint64_t monotonic_clock_ms();

}  // namespace voltlock
