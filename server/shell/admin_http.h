// The HTTP endpoint on the replica's HTTP port. cpp-httplib serves on its own threads; every
// handler that needs the replica's state asks the event loop for it and waits for the answer.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "shell/event_loop.h"
#include "shell/node.h"
#include "shell/result.h"

namespace httplib {
class Server;
}

namespace voltlock {

class AdminHttp {
public:
    AdminHttp(EventLoop& loop, Node& node);
    ~AdminHttp();
    AdminHttp(const AdminHttp&) = delete;
    AdminHttp& operator=(const AdminHttp&) = delete;

    // Binds ip:port and starts serving in the background.
    Result<Ok> start(const std::string& ip, uint16_t port);
    void stop();

private:
    EventLoop& loop_;
    Node& node_;
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
};

}  // namespace voltlock
