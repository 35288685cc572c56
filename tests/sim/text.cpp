#include "text.h"

#include <cstdarg>
#include <cstdio>

#include "core/overloaded.h"

namespace voltlock::sim {

namespace {

using ull = unsigned long long;

}  // namespace

std::string vstrprintf(const char* format, va_list args)
{
    va_list args_again;
    va_copy(args_again, args);
    const int length = std::vsnprintf(nullptr, 0, format, args);
    std::string text(static_cast<size_t>(length > 0 ? length : 0), '\0');
    std::vsnprintf(text.data(), text.size() + 1, format, args_again);
    va_end(args_again);
    return text;
}

std::string strprintf(const char* format, ...)
{
    va_list args;
    va_start(args, format);
    std::string text = vstrprintf(format, args);
    va_end(args);
    return text;
}

std::string describe(const Message& message)
{
    const std::string fields = std::visit(
        Overloaded{
            [](const Request& m) {
                return strprintf("v%llu client=%llu req=%llu payload=%zuB", ull(m.view),
                                 ull(m.client_id), ull(m.request_number), m.payload.size());
            },
            [](const Reply& m) {
                return strprintf("v%llu client=%llu req=%llu", ull(m.view), ull(m.client_id),
                                 ull(m.request_number));
            },
            [](const Prepare& m) {
                return strprintf("v%llu op=%llu commit=%llu entries=%zu", ull(m.view), ull(m.op),
                                 ull(m.commit), m.entries.size());
            },
            [](const PrepareOk& m) { return strprintf("v%llu op=%llu", ull(m.view), ull(m.op)); },
            [](const Commit& m) {
                return strprintf("v%llu commit=%llu heartbeat=%llu", ull(m.view), ull(m.commit),
                                 ull(m.heartbeat));
            },
            [](const StartViewChange& m) {
                return strprintf("v%llu%s", ull(m.view), m.asking ? " asking" : "");
            },
            [](const DoViewChange& m) {
                return strprintf("v%llu last_normal=%llu op=%llu commit=%llu fence=%llu",
                                 ull(m.view), ull(m.last_normal_view), ull(m.op), ull(m.commit),
                                 ull(m.fence_view));
            },
            [](const StartView& m) {
                return strprintf("v%llu op=%llu commit=%llu first_op=%llu entries=%zu",
                                 ull(m.view), ull(m.op), ull(m.commit), ull(m.first_op),
                                 m.entries.size());
            },
            [](const Recovery& m) { return strprintf("nonce=%llx", ull(m.nonce)); },
            [](const RecoveryResponse& m) {
                return strprintf("v%llu nonce=%llx op=%llu commit=%llu last_normal=%llu %s",
                                 ull(m.view), ull(m.nonce), ull(m.op), ull(m.commit),
                                 ull(m.last_normal_view), standing_name(m.standing));
            },
            [](const GetState& m) { return strprintf("v%llu op=%llu", ull(m.view), ull(m.op)); },
            [](const NewState& m) {
                return strprintf("v%llu op=%llu commit=%llu first_op=%llu entries=%zu",
                                 ull(m.view), ull(m.op), ull(m.commit), ull(m.first_op),
                                 m.entries.size());
            },
            [](const SnapshotOffer& m) {
                return strprintf("v%llu op=%llu", ull(m.view), ull(m.op));
            },
            [](const CommitOk& m) {
                return strprintf("v%llu heartbeat=%llu", ull(m.view), ull(m.heartbeat));
            },
            [](const Replies& m) {
                return strprintf("v%llu replies=%zu", ull(m.view), m.items.size());
            },
            [](const Requests& m) {
                return strprintf("v%llu requests=%zu", ull(m.view), m.items.size());
            },
        },
        message);
    return std::string(message_name(message)) + " " + fields;
}

}  // namespace voltlock::sim
