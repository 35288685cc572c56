#include "api/lock_service.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>

namespace voltlock::api {

namespace {

Result<FileDescriptor> make_timer(int clock)
{
    FileDescriptor fd(::timerfd_create(clock, TFD_NONBLOCK | TFD_CLOEXEC));
    if (fd.get() < 0) return os_error("timerfd_create");
    return fd;
}

void drain_timer(int fd)
{
    uint64_t expirations = 0;
    [[maybe_unused]] ssize_t got = ::read(fd, &expirations, sizeof expirations);
}

}  // namespace

// ---- Progress ----------------------------------------------------------------------------------

void Progress::publish(Revision revision)
{
    if (revision == revision_) return;
    revision_ = revision;
    for (const auto& listener : listeners_) listener(revision);
}

// ---- ClientPool --------------------------------------------------------------------------------

ClientPool::ClientPool()
{
    uint64_t random = 0;
    while (getrandom(&random, sizeof random, 0) != sizeof random) {
    }
    // Top bits 01: never 0, never near the wrap, and unlike the small ids tools pick by hand.
    base_ = (random & 0x3fff'ffff'ffff'0000ULL) | 0x4000'0000'0000'0000ULL;
}

std::optional<ClientIdentity> ClientPool::try_take()
{
    std::lock_guard lock(mutex_);
    if (free_.empty() && next_.size() >= kMaxIds) return std::nullopt;
    ClientId id = 0;
    if (!free_.empty()) {
        id = free_.back();
        free_.pop_back();
    } else {
        id = base_ + next_.size() + 1;
    }
    const RequestNumber number = ++next_[id];
    return ClientIdentity{id, number};
}

void ClientPool::give_back(ClientId id)
{
    std::lock_guard lock(mutex_);
    free_.push_back(id);
}

size_t ClientPool::size() const
{
    std::lock_guard lock(mutex_);
    return next_.size();
}

// ---- LockService (loop thread) -----------------------------------------------------------------

LockService::LockService(EventLoop& loop, Node& node, LockMachine& machine, ClientPool& pool,
                         Progress& progress)
    : loop_(loop), node_(node), machine_(machine), pool_(pool), progress_(progress)
{
}

Result<Ok> LockService::start()
{
    auto lease_timer = make_timer(CLOCK_MONOTONIC);
    if (!lease_timer.ok()) return lease_timer.error();
    auto deadline_timer = make_timer(CLOCK_MONOTONIC);
    if (!deadline_timer.ok()) return deadline_timer.error();
    lease_timer_ = std::move(lease_timer.value());
    deadline_timer_ = std::move(deadline_timer.value());

    // Leases are checked every 100 ms: TTLs are whole seconds at least.
    itimerspec every{};
    every.it_interval.tv_nsec = 100'000'000;
    every.it_value = every.it_interval;
    if (::timerfd_settime(lease_timer_.get(), 0, &every, nullptr) != 0)
        return os_error("timerfd_settime");
    if (auto watched = loop_.watch(lease_timer_.get(), [this] { on_lease_timer(); });
        !watched.ok())
        return watched.error();
    if (auto watched = loop_.watch(deadline_timer_.get(), [this] { on_deadline_timer(); });
        !watched.ok())
        return watched.error();
    node_.on_executed([this](const Executed&) { on_executed(); });
    node_.on_snapshot_installed([this] {
        // The machine jumped ahead: waiters and watches look again, from its history.
        machine_.drain_events();
        progress_.publish(machine_.revision());
        arm_deadline_timer();
    });
    progress_.publish(machine_.revision());
    return Ok{};
}

std::optional<RequestNumber> LockService::stale_request(ClientId client,
                                                       RequestNumber number) const
{
    RequestNumber latest = node_.replica().latest_request(client).value_or(0);
    if (const auto it = in_flight_.find(client); it != in_flight_.end())
        latest = std::max(latest, it->second);
    if (number < latest) return latest;
    return std::nullopt;
}

void LockService::proposing(ClientId client, RequestNumber number)
{
    RequestNumber& latest = in_flight_[client];
    latest = std::max(latest, number);
}

void LockService::proposed(ClientId client, RequestNumber number)
{
    if (const auto it = in_flight_.find(client); it != in_flight_.end() && it->second <= number)
        in_flight_.erase(it);
}

void LockService::on_executed()
{
    // Events pile up in the machine until drained; the history keeps what waits and watches read.
    const std::vector<WatchEvent> events = machine_.drain_events();
    if (leases_.active()) {
        const uint64_t now = steady_wall_clock_ms();
        const auto& sessions = machine_.state().sessions;
        for (const WatchEvent& e : events) {
            switch (e.type) {
            case EventType::session_create:
                if (const auto it = sessions.find(e.session); it != sessions.end())
                    leases_.on_created(e.session, it->second.ttl_ms, it->second.lease_epoch, now);
                break;
            case EventType::session_keepalive:
                if (const auto it = sessions.find(e.session); it != sessions.end())
                    leases_.on_renewed(e.session, it->second.lease_epoch, now);
                break;
            case EventType::session_close:
            case EventType::session_expire:
                leases_.on_ended(e.session);
                break;
            default:
                break;
            }
        }
    }
    progress_.publish(machine_.revision());
    arm_deadline_timer();
}

void LockService::check_leadership()
{
    const Replica& replica = node_.replica();
    if (replica.is_leader()) {
        if (!leases_.active() || leader_view_ != replica.view()) {
            // DESIGN.md §4: a new leader grants every session a fresh lease before expiring any.
            leases_.become_leader(steady_wall_clock_ms(), machine_.session_leases(),
                                  replica.config().leader_lease_ms);
            leader_view_ = replica.view();
            spdlog::info("r{} v{}: leader: {} sessions get a fresh lease", replica.replica(),
                         replica.view(), leases_.size());
            arm_deadline_timer();
        }
    } else if (leases_.active()) {
        leases_.step_down();
        leader_view_.reset();
    }
}

void LockService::on_lease_timer()
{
    drain_timer(lease_timer_.get());
    check_leadership();
    if (!leases_.active()) return;
    const Replica& replica = node_.replica();
    for (const ExpireSession& expiry : leases_.take_expired(steady_wall_clock_ms())) {
        spdlog::info("r{} v{}: session {} lease ran out: proposing its expiry", replica.replica(),
                     replica.view(), expiry.session);
        const SessionId session = expiry.session;
        const bool proposed = propose_internal(expiry, [this, session](const ProposeOutcome&) {
            leases_.expiry_finished(session);
        });
        if (proposed) expiries_proposed_ += 1;
        else leases_.expiry_finished(session);  // no free id: next time
    }
    // A safety net for the deadline timer (a wait must never hang on a missed wakeup).
    maybe_expire_waiters();
}

void LockService::on_deadline_timer()
{
    drain_timer(deadline_timer_.get());
    armed_at_ms_ = 0;
    maybe_expire_waiters();
    arm_deadline_timer();
}

void LockService::maybe_expire_waiters()
{
    if (!node_.replica().is_leader() || expire_waiters_in_flight_) return;
    const std::optional<uint64_t> deadline = machine_.next_deadline_ms();
    const uint64_t now = node_.cell_clock_ms();
    if (!deadline || *deadline > now) return;
    // The leader stamps entries with its clock as of its last tick: an ExpireWaiters proposed
    // right at the deadline may be stamped just before it. Do not propose again within a tick.
    if (now < last_expire_waiters_ms_ + node_.config().tick_ms) return;
    const bool proposed = propose_internal(ExpireWaiters{}, [this](const ProposeOutcome&) {
        expire_waiters_in_flight_ = false;
        arm_deadline_timer();
    });
    if (!proposed) return;
    expire_waiters_in_flight_ = true;
    last_expire_waiters_ms_ = now;
    expire_waiters_proposed_ += 1;
}

void LockService::arm_deadline_timer()
{
    uint64_t at = 0;
    if (node_.replica().is_leader()) {
        if (const std::optional<uint64_t> deadline = machine_.next_deadline_ms())
            at = std::max(*deadline, last_expire_waiters_ms_ + node_.config().tick_ms);
    }
    if (at == armed_at_ms_) return;
    armed_at_ms_ = at;
    // Relative, on the monotonic clock: the deadline is on the cell's clock, which runs with
    // the monotonic clock; an absolute CLOCK_REALTIME timer would follow a stepped clock.
    itimerspec when{};  // all zero: disarmed
    if (at != 0) {
        const uint64_t now = node_.cell_clock_ms();
        const uint64_t in_ms = at > now ? at - now : 1;  // all zero would disarm it
        when.it_value.tv_sec = static_cast<time_t>(in_ms / 1000);
        when.it_value.tv_nsec = static_cast<long>(in_ms % 1000) * 1'000'000L;
    }
    ::timerfd_settime(deadline_timer_.get(), 0, &when, nullptr);
}

bool LockService::propose_internal(const LockOp& op,
                                   std::function<void(const ProposeOutcome&)> done)
{
    const std::optional<ClientIdentity> id = pool_.try_take();
    if (!id) return false;
    node_.propose(id->client_id, id->request_number, encode_op(op),
                  [this, client = id->client_id, done = std::move(done)](const ProposeOutcome& o) {
                      pool_.give_back(client);
                      done(o);
                  });
    return true;
}

LockService::KeepAliveAnswer LockService::keep_alive(SessionId session)
{
    check_leadership();
    KeepAliveAnswer answer;
    // docs/leases.md: a lease is extended only under a leader lease a quorum confirmed; a
    // leader cut off from its followers stops here and the client looks for the new one.
    answer.leader = node_.replica().holds_leader_lease(monotonic_clock_ms());
    if (!answer.leader) return answer;
    answer.known = machine_.state().sessions.contains(session);
    if (!answer.known) return answer;
    const std::optional<LeaseTracker::Renewal> renewal =
        leases_.keep_alive(session, steady_wall_clock_ms());
    answer.known = renewal.has_value();
    if (renewal) answer.renewal = *renewal;
    return answer;
}

std::optional<uint64_t> LockService::lease_deadline_ms(SessionId session) const
{
    return leases_.deadline_ms(session);
}

}  // namespace voltlock::api
