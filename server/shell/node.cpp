#include "shell/node.h"

#include "core/assert.h"
#include "core/checksum.h"
#include "core/lock_machine.h"
#include "core/overloaded.h"
#include "core/register_machine.h"
#include "shell/version.h"

#include <spdlog/spdlog.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace voltlock {

namespace {

Result<FileDescriptor> periodic_timer(uint32_t period_ms)
{
    FileDescriptor fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (fd.get() < 0) return os_error("timerfd_create");
    itimerspec spec{};
    spec.it_interval.tv_sec = period_ms / 1000;
    spec.it_interval.tv_nsec = static_cast<long>(period_ms % 1000) * 1000000L;
    spec.it_value = spec.it_interval;
    if (::timerfd_settime(fd.get(), 0, &spec, nullptr) != 0) return os_error("timerfd_settime");
    return fd;
}

std::unique_ptr<StateMachine> make_machine(MachineKind kind)
{
    if (kind == MachineKind::register_machine) return std::make_unique<RegisterMachine>();
    return std::make_unique<LockMachine>();
}

}  // namespace

uint64_t monotonic_clock_ms()
{
    using namespace std::chrono;
    return static_cast<uint64_t>(
        duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count());
}

uint64_t steady_wall_clock_ms()
{
    using namespace std::chrono;
    static const uint64_t wall_at_start = static_cast<uint64_t>(
        duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
    static const uint64_t monotonic_at_start = monotonic_clock_ms();
    return wall_at_start + (monotonic_clock_ms() - monotonic_at_start);
}

Result<std::unique_ptr<Node>> Node::create(const DaemonConfig& config, Start start,
                                           EventLoop& loop, std::unique_ptr<Storage> storage,
                                           std::shared_ptr<const ServedSnapshot> restored)
{
    std::vector<sockaddr_in> peers;
    for (const PeerAddress& peer : config.replicas) {
        auto address = ipv4_address(peer.ip, peer.udp_port);
        if (!address.ok()) return address.error();
        peers.push_back(address.value());
    }
    auto socket = UdpSocket::bind(peers.at(config.replica), config.max_message_bytes);
    if (!socket.ok()) return socket.error();
    auto timer = periodic_timer(config.tick_ms);
    if (!timer.ok()) return timer.error();

    std::unique_ptr<Electrode> electrode;
    if (config.electrode == ElectrodeMode::on) {
        // Durability sync persists every batch before acknowledging it; the kernel cannot.
        uint32_t fast_paths = config.fast_paths;
        if (config.replica_config().persist_log && (fast_paths & VL_FAST_PATH_FAST_ACK)) {
            fast_paths &= ~uint32_t{VL_FAST_PATH_FAST_ACK};
            spdlog::info("r{}: durability sync: the follower fast-ack is off (a follower "
                         "persists each batch before acknowledging it)",
                         config.replica);
        }
        auto started = Electrode::start(config, fast_paths);
        if (started.ok()) {
            electrode = std::move(started.value());
            spdlog::info("r{}: electrode on {} ({} XDP): {}", config.replica, config.interface,
                         electrode->xdp_native() ? "native" : "generic",
                         fast_paths_name(fast_paths));
        } else {
            spdlog::warn("r{}: {}; VR runs in user space", config.replica,
                         started.error().message());
        }
    }

    std::unique_ptr<Node> node(new Node(config, std::move(start), loop,
                                        std::move(socket.value()), std::move(timer.value()),
                                        std::move(peers), std::move(electrode),
                                        std::move(storage), std::move(restored)));
    Node* raw = node.get();
    if (raw->electrode_) {
        if (auto watched =
                loop.watch(raw->electrode_->ring_fd(), [raw] { raw->on_ring_records(); });
            !watched.ok())
            return watched.error();
    }
    if (auto watched = loop.watch(raw->socket_.fd(), [raw] { raw->on_datagrams(); });
        !watched.ok())
        return watched.error();
    if (auto watched = loop.watch(raw->timer_.get(), [raw] { raw->on_timer(); }); !watched.ok())
        return watched.error();
    return node;
}

ReplicaConfig replica_config(const DaemonConfig& config, const Electrode* electrode)
{
    ReplicaConfig replica = config.replica_config();
    replica.fast_ack_allowed = electrode && (electrode->enabled() & VL_FAST_PATH_FAST_ACK) &&
                               !replica.persist_log;
    return replica;
}

Node::Node(const DaemonConfig& config, Start start, EventLoop& loop, UdpSocket socket,
           FileDescriptor timer, std::vector<sockaddr_in> peers,
           std::unique_ptr<Electrode> electrode, std::unique_ptr<Storage> storage,
           std::shared_ptr<const ServedSnapshot> restored)
    : config_(config),
      wire_(config.cluster_id, config.replication_keys),
      electrode_(std::move(electrode)),
      kernel_acks_fed_(config.replicas.size(), 0),
      machine_(make_machine(config.machine)),
      replica_(replica_config(config, electrode_.get()), *machine_, start),
      socket_(std::move(socket)),
      timer_(std::move(timer)),
      peers_(std::move(peers)),
      replies_to_peers_(peers_.size()),
      requests_to_peers_(peers_.size()),
      encode_buffer_(config.max_message_bytes),
      loop_(loop),
      storage_(std::move(storage))
{
    // Served only if the replica took it (it refuses a snapshot that does not decode).
    if (restored && replica_.log_base() == restored->op) served_ = std::move(restored);
    writer_ = std::thread([this] { snapshot_writer_thread(); });
}

void Node::stop()
{
    // The writer thread first, with the snapshot it is writing: one it wrote after the stop's
    // own could replace it (an older snapshot drops the log stored after the newer one).
    stopping_ = true;
    writer_wakeup_.notify_all();
    if (writer_.joinable()) writer_.join();
    step(Stop{});  // the core drains the kernel first if it may hold acknowledged Prepares
    const bool writes_on_stop = storage_ && !replica_.config().persist_log;
    spdlog::info("r{} v{}: stopped at op {} commit {}{}", config_.replica, replica_.view(),
                 replica_.op(), replica_.commit(),
                 !writes_on_stop ? ""
                 : wrote_clean_stop_
                     ? "; what it applied is in its snapshot, what it acknowledged after in its log"
                     : "; its data directory is left as it was (it was recovering, or held a "
                       "state not yet confirmed as the cell's)");
}

Node::~Node()
{
    stopping_ = true;
    writer_wakeup_.notify_all();
    if (writer_.joinable()) writer_.join();
    if (fetcher_.joinable()) fetcher_.join();
}

void Node::on_datagrams()
{
    // What the kernel acknowledged came first: the ring before the socket.
    if (electrode_) take_ring_records();
    socket_.receive_all(
        [this](std::span<const uint8_t> datagram, const sockaddr_in& from) {
            on_datagram(datagram, from);
        });
    step(Flush{});
    send_queued();
}

uint64_t Node::cell_clock_ms() const { return steady_wall_clock_ms() + cell_ahead_ms_; }

void Node::follow_cell_time()
{
    // Only forward: a replica whose clock is ahead of the cell's keeps its own, and the cell's
    // time follows it once it stamps (as it did before this, when every replica stamped by its
    // own clock). What it stamps is never behind what it applied, as it would be if it had
    // started with its clock behind (not yet set at boot), or behind the clock of the leader
    // before it: the cell's time, the largest stamp applied, stood still until its clock
    // caught up, and with it every wait and lock-delay.
    const uint64_t applied = machine_->time_ms();
    const uint64_t own = steady_wall_clock_ms();
    if (applied > own + cell_ahead_ms_) {
        if (applied - own > cell_ahead_ms_ + 1000)
            spdlog::warn("r{}: the cell's time is {} ms ahead of this replica's clock: this "
                         "replica stamps ops by the cell's time",
                         config_.replica, applied - own);
        cell_ahead_ms_ = applied - own;
    }
}

void Node::on_timer()
{
    uint64_t expirations = 0;
    if (::read(timer_.get(), &expirations, sizeof expirations) != sizeof expirations) return;
    // The ring wakes nobody per record: the follower catches up here, off the commit path.
    if (electrode_) take_ring_records();
    follow_cell_time();
    // After a stall, catch up a little at a time rather than fire every timeout at once.
    for (uint64_t i = 0; i < std::min<uint64_t>(expirations, 4); i++) {
        ticks_ += 1;
        if (electrode_) feed_kernel_acks();
        step(Tick{.now_ms = cell_clock_ms(), .monotonic_ms = monotonic_clock_ms()});
    }
    // A neighbour entry can appear or change at any time; the peers map follows it, every tick
    // until every peer resolves (broadcast waits for that), then every tenth.
    if (electrode_ && (!electrode_->peers_resolved() || ticks_ % 10 == 0))
        electrode_->refresh_peers();
    step(Flush{});
    send_queued();
}

void Node::on_ring_records()
{
    take_ring_records();
    step(Flush{});
    send_queued();
}

void Node::take_ring_records()
{
    electrode_->consume([this](std::span<const uint8_t> record) { take_ring_record(record); });
    deliver_ring_records(false);
}

void Node::take_ring_record(std::span<const uint8_t> datagram)
{
    // The kernel verified the datagram before it acknowledged it; decode checks it again.
    DecodeResult decoded = decode(datagram, wire_);
    if (!decoded.ok()) return;
    if (auto* prepare = std::get_if<Prepare>(&decoded.value().message))
        ring_records_.take(std::move(*prepare));
}

void Node::deliver_ring_records(bool past_gaps)
{
    while (auto next = ring_records_.next(replica_.op(), past_gaps))
        step(Receive{.message = std::move(*next), .flags = VL_FLAG_KERNEL_ACK});
}

void Node::drain_kernel()
{
    // The record that switched the fast path off is in the kernel (execute wrote it): every op
    // the kernel acknowledged is now in the ring.
    if (electrode_) {
        take_ring_records();
        deliver_ring_records(true);
    }
    step(KernelDrained{});
}

void Node::feed_kernel_acks()
{
    // The leader's XDP counts acknowledgements and drops all but the one that completes a
    // quorum, so the core's own per-follower record goes stale; the kernel keeps the highest op
    // each follower acknowledged, and the core hears it here.
    if (!replica_.is_leader() || !(electrode_->enabled() & VL_FAST_PATH_QUORUM)) return;
    const std::vector<vl_follower_ack> acked = electrode_->acked_ops();
    for (ReplicaIndex r = 0; r < acked.size(); r++) {
        if (r == config_.replica || acked[r].view != replica_.view()) continue;
        if (acked[r].op <= kernel_acks_fed_[r]) continue;
        kernel_acks_fed_[r] = acked[r].op;
        step(Receive{.message = PrepareOk{.view = acked[r].view, .replica = r, .op = acked[r].op}});
    }
}


void Node::warn_bad_mac(const sockaddr_in& from)
{
    // One line per sender a minute, and at most kSendersPerMinute senders: a flood of forged
    // source addresses cannot fill the journal; the counter still counts every datagram.
    constexpr uint64_t kMinuteMs = 60'000;
    constexpr size_t kSendersPerMinute = 16;
    const uint64_t now_ms = monotonic_clock_ms();
    if (bad_mac_warned_.empty() || now_ms - bad_mac_window_start_ms_ >= kMinuteMs) {
        bad_mac_warned_.clear();
        bad_mac_window_start_ms_ = now_ms;
    }
    const uint64_t sender = (uint64_t{ntohl(from.sin_addr.s_addr)} << 16) | ntohs(from.sin_port);
    if (bad_mac_warned_.size() >= kSendersPerMinute || !bad_mac_warned_.insert(sender).second)
        return;
    std::string who = to_string(from);
    for (ReplicaIndex r = 0; r < peers_.size(); r++)
        if (same_address(peers_[r], from)) who += " (r" + std::to_string(r) + ")";
    spdlog::warn("r{}: datagrams from {} fail the cell key's MAC and are dropped: a replica with "
                 "another cell.key (replication_key_file), or a key rotation not finished "
                 "(docs/security.md, \"Rotating the key\"); voltlock_rejected_total{{reason="
                 "\"bad_mac\"}} counts them (this warning: once a minute per sender)",
                 config_.replica, who);
}

void Node::on_datagram(std::span<const uint8_t> datagram, const sockaddr_in& from)
{
    DecodeResult decoded = decode(datagram, wire_);
    if (!decoded.ok()) {
        counters_.rejected[static_cast<size_t>(decoded.error())] += 1;
        spdlog::debug("r{}: rejected {} bytes from {}: {}", config_.replica, datagram.size(),
                     to_string(from), decode_error_name(decoded.error()));
        if (decoded.error() == DecodeError::bad_mac) warn_bad_mac(from);
        return;
    }
    Message& message = decoded.value().message;
    if (const auto* request = std::get_if<Request>(&message)) {
        // A follower's API forwarding an op, or a client on UDP.
        const bool from_replica = std::any_of(peers_.begin(), peers_.end(), [&](const auto& peer) {
            return same_address(peer, from);
        });
        if (note_request(*request, from, from_replica)) {
            counters_.messages_in[message_type(message)] += 1;
            return;
        }
    } else {
        // Replica messages are believed only from the address configured for that replica.
        const ReplicaIndex sender = sender_of(message);
        if (sender >= peers_.size() || !same_address(peers_[sender], from)) {
            counters_.unknown_peer += 1;
            return;
        }
    }
    counters_.messages_in[message_type(message)] += 1;
    if (auto* requests = std::get_if<Requests>(&message)) {
        std::erase_if(requests->items, [&](const BatchedRequest& item) {
            return note_request(request_of(*requests, item), from, true);
        });
        if (requests->items.empty()) return;  // the API took them all
    }
    // The answer to a request this replica sent for its API (send_request); the core then
    // learns the leader's commit number from it. The listener first: a read waiting for that
    // commit point is registered before the core applies up to it.
    if (const auto* reply = std::get_if<Reply>(&message); reply && reply_listener_)
        reply_listener_(*reply);
    if (const auto* replies = std::get_if<Replies>(&message); replies && reply_listener_)
        for (const BatchedReply& item : replies->items)
            reply_listener_(reply_of(*replies, item));
    step(Receive{.message = std::move(message), .flags = decoded.value().flags});
}

void Node::step(const Input& input)
{
    // Local: what the effects call back (a proposal's completion) may step the replica again.
    Effects effects;
    replica_.step(input, effects);
    for (const Trace& trace : replica_.traces()) {
        counters_.ignored[static_cast<size_t>(trace.reason)] += 1;
        spdlog::debug("r{} v{}: {} op={} {}", config_.replica, trace.view, trace.event, trace.op,
                      ignored_name(trace.reason));
    }
    // Our own snapshot is of the replica as it stands now: taken before any effect runs.
    for (const Effect& effect : effects) {
        const auto* write = std::get_if<WriteSnapshot>(&effect);
        if (write && write->snapshot.empty()) take_own_snapshot(write->op);
    }
    bool drain = false;
    // The Persist effects of a step (the view, with a data directory; the log too, with
    // durability sync) go to disk in one write (group commit), before any effect after them
    // is carried out.
    StorageBatch batch;
    for (Effect& effect : effects) {
        if (auto* log = std::get_if<PersistLog>(&effect)) {
            batch.replace_log_after(log->after, std::move(log->entries));
        } else if (const auto* view = std::get_if<PersistView>(&effect)) {
            batch.set_view(view->view, view->last_normal_view);
        } else if (std::holds_alternative<PersistStopped>(effect)) {
            batch.set_clean_stop(true);
            wrote_clean_stop_ = true;
        } else {
            persist(batch);
            if (std::holds_alternative<DrainKernel>(effect))
                drain = true;  // after the others: the record turning the fast path off first
            else
                execute(effect);
        }
    }
    persist(batch);
    if (drain) drain_kernel();
}

void Node::persist(StorageBatch& batch)
{
    if (batch.empty()) return;
    VL_ASSERT(storage_ != nullptr, "the core persists the log only with a data directory");
    if (auto written = storage_->write(batch, /*sync=*/true); !written.ok())
        fail_stop(written.error());
    batch = StorageBatch{};
}

void Node::fail_stop(const Error& error)
{
    // What this replica sends promises that its view (and, with durability sync, what it
    // acknowledged) is on disk; unable to keep that promise it must not send anything more.
    // The others carry on; restarted once the disk is fixed, it recovers from what it had
    // written.
    spdlog::critical("r{}: {}: stopping, since this replica can no longer persist its view "
                     "or what it acknowledges",
                     config_.replica, error.message());
    spdlog::shutdown();
    std::_Exit(1);
}

void Node::take_own_snapshot(Op op)
{
    // As the replica stands now, before anything steps it again (WriteSnapshot): a child encodes
    // it off the loop (shell/forked_encoding.h).
    auto encoding = ForkedEncoding::start([this] { return replica_.encode_snapshot(); });
    if (encoding.ok()) {
        queue_for_writer(SnapshotJob{.op = op, .encoding = std::move(encoding.value())});
        return;
    }
    spdlog::warn("r{}: {}; encoding the snapshot of op {} on the event loop instead",
                 config_.replica, encoding.error().message(), op);
    write_snapshot(op, replica_.encode_snapshot(), false);
}

void Node::write_snapshot(Op op, Bytes bytes, bool before_next_effect)
{
    auto snapshot = make_served_snapshot(op, std::move(bytes));
    // Served when it is the core's log base, which the core offers: a fetched one at once, our
    // own once written (until then the core offers, and we serve, the one before).
    if (op == replica_.log_base()) serve(snapshot);
    if (!storage_) {
        // In memory only: as durable as it will ever be.
        loop_.post([this, op, snapshot] { snapshot_written(op, snapshot, true); });
        return;
    }
    if (before_next_effect) {
        std::lock_guard lock(snapshot_write_mutex_);
        if (auto written = storage_->write_snapshot(op, snapshot->bytes); !written.ok())
            fail_stop(written.error());
        newest_snapshot_written_ = op;
        loop_.post([this, op, snapshot] { snapshot_written(op, snapshot, true); });
        return;
    }
    queue_for_writer(SnapshotJob{.op = op, .snapshot = std::move(snapshot)});
}

void Node::queue_for_writer(SnapshotJob job)
{
    {
        std::lock_guard lock(writer_mutex_);
        writer_queue_.push_back(std::move(job));
    }
    writer_wakeup_.notify_one();
}

void Node::snapshot_writer_thread()
{
    // Off the loop: a snapshot of a large state takes a while to encode and to write.
    while (true) {
        std::optional<SnapshotJob> job;
        {
            std::unique_lock lock(writer_mutex_);
            writer_wakeup_.wait(lock, [this] { return stopping_ || !writer_queue_.empty(); });
            if (stopping_) return;
            job.emplace(std::move(writer_queue_.front()));
            writer_queue_.pop_front();
        }
        const Op op = job->op;
        const bool ours = job->encoding.has_value();
        const auto started = std::chrono::steady_clock::now();
        Result<Ok> written = Ok{};
        if (ours) {
            auto encoded = job->encoding->finish();
            if (encoded.ok())
                job->snapshot = make_served_snapshot(op, std::move(encoded.value()));
            else
                written = encoded.error();
        }
        const auto encoded_at = std::chrono::steady_clock::now();
        if (written.ok() && storage_) {
            std::lock_guard lock(snapshot_write_mutex_);
            // With the log persisted, a snapshot the loop wrote meanwhile (before_next_effect)
            // has the log after it on disk; an older one would drop that log.
            if (replica_.config().persist_log && op < newest_snapshot_written_)
                written = Error{0, "superseded by the snapshot of op " +
                                       std::to_string(newest_snapshot_written_)};
            else
                written = storage_->write_snapshot(op, job->snapshot->bytes);
            if (written.ok()) newest_snapshot_written_ = op;
        }
        const auto ms = [](auto from, auto to) {
            return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
        };
        const auto encode_ms = ms(started, encoded_at);
        const auto write_ms = ms(encoded_at, std::chrono::steady_clock::now());
        const std::string error = written.ok() ? "" : written.error().message();
        const std::string encoding =
            ours ? " (encoded off the loop in " + std::to_string(encode_ms) + " ms)" : "";
        loop_.post([this, op, snapshot = job->snapshot, write_ms, encoding, error] {
            if (!error.empty()) {
                spdlog::error("r{}: snapshot of op {} not written: {}; the log is kept whole "
                              "and the next snapshot tries again",
                              config_.replica, op, error);
            } else if (storage_) {
                spdlog::info("r{}: snapshot of op {} written: {:.1f} MiB in {} ms{}",
                             config_.replica, op,
                             static_cast<double>(snapshot->bytes.size()) / (1 << 20), write_ms,
                             encoding);
            }
            last_storage_error_ = error;
            snapshot_written(op, snapshot, error.empty());
        });
    }
}

void Node::fetch_snapshot_from(const FetchSnapshot& fetch)
{
    if (fetching_) return;  // one at a time; the core asks again while it waits
    if (fetcher_.joinable()) fetcher_.join();  // the last one has posted its result
    fetching_ = true;
    spdlog::info("r{}: fetching the snapshot of op {} (or newer) from r{}", config_.replica,
                 fetch.op, fetch.from);
    fetcher_ = std::thread([this, from = fetch.from, op = fetch.op,
                            peer = config_.replicas.at(fetch.from)] {
        auto fetched = std::make_shared<Result<Bytes>>(
            fetch_snapshot(config_, peer, from, op, download_, stopping_));
        loop_.post([this, from, fetched] {
            fetching_ = false;
            if (!fetched->ok()) {
                spdlog::warn("r{}: {}; asking again", config_.replica,
                             fetched->error().message());
                return;
            }
            spdlog::info("r{}: fetched a snapshot from r{}: {:.1f} MiB", config_.replica, from,
                         static_cast<double>(fetched->value().size()) / (1 << 20));
            step_and_flush(SnapshotFetched{.snapshot = std::move(fetched->value()), .from = from});
        });
    });
}

void Node::snapshot_written(Op op, const std::shared_ptr<const ServedSnapshot>& snapshot,
                            bool ok)
{
    step_and_flush(SnapshotWritten{.op = op, .ok = ok});
    if (ok && replica_.log_base() == op) serve(snapshot);  // the core compacted up to it
}

void Node::serve(std::shared_ptr<const ServedSnapshot> snapshot)
{
    std::lock_guard lock(served_mutex_);
    served_ = std::move(snapshot);
}

std::shared_ptr<const ServedSnapshot> Node::served_snapshot() const
{
    std::lock_guard lock(served_mutex_);
    return served_;
}

void Node::execute(Effect& effect)
{
    std::visit(Overloaded{
                   [&](const Send& send) { send_message(peers_.at(send.to), send.message); },
                   [&](const Broadcast& b) { broadcast(b.message); },
                   [&](const SendReply& reply) { deliver_reply(reply.reply); },
                   [&](const Executed& executed) {
                       if (executed.entry.client_id == kCellClientId)
                           spdlog::warn("r{}: op {}: the cell restarted from snapshots and may "
                                        "have lost writes after them; revisions and lock "
                                        "generations jump past any those writes used",
                                        config_.replica, executed.op);
                       for (const ExecutedListener& listener : executed_listeners_)
                           listener(executed);
                   },
                   [&](const KernelStateChanged& changed) {
                       if (electrode_) {
                           // Before any effect that follows it leaves (docs/electrode.md).
                           if (auto written = electrode_->write_state(changed.state); !written.ok())
                               spdlog::error("r{}: {}", config_.replica, written.error().message());
                           if (changed.state.view != last_state_.view)
                               std::fill(kernel_acks_fed_.begin(), kernel_acks_fed_.end(), 0);
                       }
                       log_transition(changed.state);
                       if (!replica_.is_leader()) fail_proposals();
                   },
                   [](const DrainKernel&) {},
                   [](const PersistLog&) {},   // step() batches these
                   [](const PersistView&) {},  // and these
                   [](const PersistStopped&) {},  // and this
                   [&](WriteSnapshot& write) {
                       if (!write.snapshot.empty())  // our own: step() took it already
                           write_snapshot(write.op, std::move(write.snapshot),
                                          write.before_next_effect);
                   },
                   [&](const FetchSnapshot& fetch) { fetch_snapshot_from(fetch); },
                   [&](const SnapshotInstalled& installed) {
                       spdlog::info("r{}: installed the snapshot of op {}", config_.replica,
                                    installed.op);
                       for (const auto& listener : installed_listeners_) listener();
                   },
               },
               effect);
}

void Node::propose(ClientId client_id, RequestNumber request_number, Bytes payload,
                   ProposeDone done)
{
    if (!replica_.is_leader()) {
        done(ProposeOutcome{.committed = false, .leader = replica_.known_leader()});
        return;
    }
    // One Reply answers everyone waiting under a pair, so a second payload under it must not
    // wait with the first: it reused the number (the core answers the same across replicas).
    const uint32_t request_crc = crc32c(payload);
    Proposal& proposal = proposals_[{client_id, request_number}];
    if (proposal.waiting.empty()) proposal.request_crc = request_crc;
    if (proposal.request_crc != request_crc) return done(ProposeOutcome{.committed = true});
    const auto proposed_at = std::chrono::steady_clock::now();
    proposal.waiting.push_back(
        [this, proposed_at, done = std::move(done)](const ProposeOutcome& outcome) {
            if (outcome.committed)
                commit_latency_.record(static_cast<uint64_t>(
                    std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - proposed_at)
                        .count()));
            done(outcome);
        });
    step(Receive{Request{.view = replica_.view(),
                         .client_id = client_id,
                         .request_number = request_number,
                         .payload = std::move(payload)}});
    flush_at_end_of_turn();
}

bool Node::note_request(const Request& request, const sockaddr_in& from, bool from_replica)
{
    // Only the leader answers a Request (§4.1): elsewhere the core drops it, and the sender's
    // address is not needed.
    if (!replica_.is_leader()) return false;
    // An address is kept until the Reply leaves; a Request that never gets one (one the core
    // dropped) leaves its entry behind. Past this many they all go: a sender still waiting for
    // its Reply sends the Request again.
    constexpr size_t kMaxClientAddresses = 65'536;
    if (clients_.size() >= kMaxClientAddresses) {
        clients_.clear();
        forwarded_arrivals_.clear();
    }
    clients_[request.client_id] = from;
    if (!from_replica) return false;
    if (request_taker_ && request_taker_(request)) return true;
    auto& arrival = forwarded_arrivals_[request.client_id];
    if (arrival.first != request.request_number)  // a retransmit keeps the first time
        arrival = {request.request_number, std::chrono::steady_clock::now()};
    return false;
}

void Node::send_request(ReplicaIndex leader, const Request& request)
{
    requests_to_peers_.at(leader).push_back(request);
    flush_at_end_of_turn();
}

void Node::answer_request(const Reply& reply)
{
    const auto client = clients_.find(reply.client_id);
    if (client == clients_.end()) return;  // the follower asks again
    send_reply(client->second, reply);
    clients_.erase(client);
    flush_at_end_of_turn();
}

void Node::flush_at_end_of_turn()
{
    if (std::exchange(flush_pending_, true)) return;
    loop_.at_end_of_turn([this] {
        flush_pending_ = false;
        step(Flush{});
        send_queued();
    });
}

void Node::step_and_flush(const Input& input)
{
    step(input);
    step(Flush{});
    send_queued();
}

void Node::deliver_reply(const Reply& reply)
{
    if (const auto it = proposals_.find({reply.client_id, reply.request_number});
        it != proposals_.end()) {
        std::vector<ProposeDone> waiting = std::move(it->second.waiting);
        proposals_.erase(it);
        for (ProposeDone& done : waiting)
            done(ProposeOutcome{.committed = true, .result = reply.result});
        return;
    }
    if (const auto arrival = forwarded_arrivals_.find(reply.client_id);
        arrival != forwarded_arrivals_.end() && arrival->second.first == reply.request_number) {
        commit_latency_.record(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(
                std::chrono::steady_clock::now() - arrival->second.second)
                .count()));
        forwarded_arrivals_.erase(arrival);
    }
    const auto client = clients_.find(reply.client_id);
    if (client == clients_.end()) {
        counters_.unknown_client += 1;  // it will retry, perhaps to us
        return;
    }
    send_reply(client->second, reply);
    // Answered: a retry brings its address again. Kept, the map would grow by every client id
    // that ever sent a Request.
    clients_.erase(client);
}

void Node::fail_proposals()
{
    // No longer the leader: what was proposed here may still commit under the next one, and a
    // retry with the same client id and request number will then find it executed.
    auto failed = std::move(proposals_);
    proposals_.clear();
    for (auto& [request, proposal] : failed)
        for (ProposeDone& done : proposal.waiting) done(ProposeOutcome{.committed = false});
}

void Node::broadcast(const Message& message)
{
    // Electrode §4.1: a Prepare or Commit leaves once, marked, and TC egress clones it to every
    // other follower; only when every one of them resolves, else one datagram per follower.
    const bool clonable = std::holds_alternative<Prepare>(message) ||
                          std::holds_alternative<Commit>(message);
    if (electrode_ && clonable && electrode_->can_broadcast()) {
        const size_t first_other = config_.replica == 0 ? 1 : 0;
        send_message(peers_[first_other], message, VL_FLAG_BROADCAST);
        return;
    }
    for (size_t r = 0; r < peers_.size(); r++)
        if (r != config_.replica) send_message(peers_[r], message);
}

void Node::send_message(const sockaddr_in& to, const Message& message, uint16_t flags)
{
    const size_t length = encode(message, wire_, flags, encode_buffer_);
    // The core sizes every message to the configured maximum; anything else is a bug there.
    VL_ASSERT(length > 0, "the core's messages fit in one datagram");
    counters_.messages_out[message_type(message)] += 1;
    socket_.queue(to, {encode_buffer_.data(), length});
}

void Node::send_reply(const sockaddr_in& to, const Reply& reply)
{
    for (size_t r = 0; r < peers_.size(); r++) {
        if (same_address(peers_[r], to)) {
            replies_to_peers_[r].push_back(reply);
            return;
        }
    }
    send_message(to, reply);
}

void Node::send_queued()
{
    const uint32_t max_bytes = config_.max_message_bytes;
    for (size_t r = 0; r < peers_.size(); r++) {
        if (!replies_to_peers_[r].empty())
            for (const Message& message :
                 batch_replies(std::exchange(replies_to_peers_[r], {}), max_bytes))
                send_message(peers_[r], message);
        if (!requests_to_peers_[r].empty())
            for (const Message& message : batch_requests(
                     std::exchange(requests_to_peers_[r], {}), config_.replica, max_bytes))
                send_message(peers_[r], message);
    }
    socket_.flush();
}

void Node::log_transition(const vl_kernel_state& state)
{
    if (state.status != last_state_.status || state.view != last_state_.view) {
        spdlog::info("r{} v{}: status {}, leader r{}, op {}, commit {}", state.replica, state.view,
                     status_name(static_cast<Status>(state.status)), state.leader,
                     state.last_op, state.commit);
    }
    last_state_ = state;
}

nlohmann::json Node::storage_status() const
{
    const auto served = served_snapshot();
    return nlohmann::json{
        {"data_dir", storage_ ? nlohmann::json(storage_->path()) : nlohmann::json()},
        {"durability", storage_ ? durability_name(config_.durability) : "memory"},
        {"snapshot_op", served ? served->op : 0},
        {"snapshot_bytes", served ? served->bytes.size() : 0},
        {"last_error", last_storage_error_},
    };
}

nlohmann::json Node::event_loop_status() const
{
    const EventLoop::TurnStats turns = loop_.turn_stats();
    return nlohmann::json{
        {"turns", turns.turns},
        {"longest_turn_us", turns.longest_turn_us},
        {"turns_over_100ms", turns.turns_over_100ms},
        {"turns_over_1s", turns.turns_over_1s},
    };
}

std::optional<std::string> Node::state_digest()
{
    // The machine's state is the same at the same commit number (ops apply as they commit, and a
    // snapshot installed at op N is the state after N) as long as no recovery or snapshot
    // replaced it with another history's, which may reach the same number.
    const ReplicaCounters& core = replica_.counters();
    const std::pair state{replica_.commit(), core.recoveries + core.snapshots_installed};
    if (!digest_ || digest_->first != state) {
        const uint64_t turn = loop_.turn_stats().turns;
        if (digest_turn_ == turn) return std::nullopt;
        digest_ = {state, machine_->state_digest()};
        digest_turn_ = turn;
        digests_computed_ += 1;
    }
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(digest_->second));
    return text;
}

nlohmann::json Node::status() const
{
    using Json = nlohmann::json;
    Json messages_in = Json::object();
    Json messages_out = Json::object();
    for (uint8_t type = VL_MSG_TYPE_MIN; type <= VL_MSG_TYPE_MAX; type++) {
        const char* name = message_type_name(static_cast<vl_message_type>(type));
        messages_in[name] = counters_.messages_in[type];
        messages_out[name] = counters_.messages_out[type];
    }
    Json rejected = Json::object();
    for (size_t e = 0; e < decode_error_count; e++)
        rejected[decode_error_name(static_cast<DecodeError>(e))] = counters_.rejected[e];
    Json ignored = Json::object();
    for (size_t reason = 0; reason < ignored_count; reason++)
        ignored[ignored_name(static_cast<Ignored>(reason))] = counters_.ignored[reason];

    const ReplicaCounters& core = replica_.counters();
    Json machine = {{"kind", config_.machine == MachineKind::lock ? "lock" : "register"},
                    {"digests_computed", digests_computed_}};
    Json status{
        {"replica", replica_.replica()},
        {"version", server_version()},
        {"replica_count", config_.replicas.size()},
        {"cluster_id", config_.cluster_id},
        {"status", status_name(replica_.status())},
        {"view", replica_.view()},
        // /readyz, /v1/cluster and voltlock_leader say the same (Replica::known_leader).
        {"leader", replica_.known_leader() ? Json(*replica_.known_leader()) : Json()},
        {"op", replica_.op()},
        {"commit", replica_.commit()},
        {"log_base", replica_.log_base()},
        {"acked_ops", replica_.acked_ops()},
        {"machine", machine},
        {"counters",
         {{"messages_in", messages_in},
          {"messages_out", messages_out},
          {"rejected", rejected},
          {"ignored", ignored},
          {"unknown_peer", counters_.unknown_peer},
          {"unknown_client", counters_.unknown_client},
          {"send_drops", socket_.send_drops()},
          {"retransmissions", core.retransmissions},
          {"view_changes", core.view_changes},
          {"state_transfers", core.state_transfers},
          {"recoveries", core.recoveries},
          {"requests_dropped", core.requests_dropped},
          {"requests_reused", core.requests_reused},
          {"clients_forgotten", core.clients_forgotten},
          {"snapshots_written", core.snapshots_written},
          {"snapshots_installed", core.snapshots_installed},
          {"snapshots_refused", core.snapshots_refused},
          {"cell_restarts", core.cell_restarts},
          {"bootstraps", core.bootstraps}}},
        {"commit_latency_us", commit_latency_.json()},
        {"event_loop", event_loop_status()},
        {"storage", storage_status()},
        {"electrode", electrode_ ? electrode_->status() : nlohmann::json{{"mode", "off"}}},
        {"replication_auth", wire_.authenticated() ? "siphash-2-4" : "none"},
        {"cell_clock_ahead_ms", cell_clock_ahead_ms()},
    };
    // The kernel's exit counters (wire.h's vl_stat), xdp_bad_mac among them, for /metrics.
    if (electrode_) status["counters"]["kernel"] = electrode_->counters();
    return status;
}

}  // namespace voltlock
