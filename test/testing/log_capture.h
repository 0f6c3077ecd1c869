// Keeps the daemon's log lines (the default logger's, info and above) for the life of the object.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace topodra::testing {

class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<Sink>()) {
    previous_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  // The lines that contain `text`.
  std::vector<std::string> Lines(const std::string& text) const {
    std::lock_guard<std::mutex> lock(sink_->lines_mu);
    std::vector<std::string> out;
    for (const std::string& l : sink_->lines) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    void sink_it_(const spdlog::details::log_msg& m) override {
      if (m.level < spdlog::level::info) return;
      std::lock_guard<std::mutex> lock(lines_mu);
      lines.emplace_back(m.payload.data(), m.payload.size());
    }
    void flush_() override {}
    mutable std::mutex lines_mu;
    std::vector<std::string> lines;
  };
  std::shared_ptr<Sink> sink_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace topodra::testing
