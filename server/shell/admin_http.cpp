#include "shell/admin_http.h"

#include <httplib.h>

#include <chrono>
#include <future>

namespace voltlock {

AdminHttp::AdminHttp(EventLoop& loop, Node& node)
    : loop_(loop), node_(node), server_(std::make_unique<httplib::Server>())
{
    server_->Get("/v1/status", [this](const httplib::Request&, httplib::Response& response) {
        auto answer = std::make_shared<std::promise<std::string>>();
        std::future<std::string> status = answer->get_future();
        loop_.post([this, answer] { answer->set_value(node_.status().dump()); });
        if (status.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
            response.status = 503;
            response.set_content(R"({"code":"unavailable","message":"the replica's event loop )"
                                 R"(did not answer within 2 s"})",
                                 "application/json");
            return;
        }
        response.set_content(status.get(), "application/json");
    });
    server_->Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
        response.set_content(R"({"ok":true})", "application/json");
    });
}

AdminHttp::~AdminHttp() { stop(); }

Result<Ok> AdminHttp::start(const std::string& ip, uint16_t port)
{
    if (!server_->bind_to_port(ip.c_str(), port))
        return Error{0, "bind HTTP " + ip + ":" + std::to_string(port) +
                            ": address in use or not available"};
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    return Ok{};
}

void AdminHttp::stop()
{
    if (thread_.joinable()) {
        server_->stop();
        thread_.join();
    }
}

}  // namespace voltlock
