// ConnectionStream: the httplib::Stream a handler thread answers one request on. Reads come
// from the complete request ConnectionGate already read off the connection (nothing is read
// from the socket on a handler thread, so a slow client cannot hold one); writes go to the
// socket, or through TLS, until all bytes are out or the write deadline passes: a client
// that does not read its answer holds a handler for at most that long.
#pragma once

#include <chrono>
#include <string>

#include <httplib.h>

struct ssl_st;

namespace perftracker {

class ConnectionStream : public httplib::Stream {
 public:
  using Clock = std::chrono::steady_clock;

  // `fd` is non-blocking; `ssl` is null for plain HTTP. Neither is owned.
  ConnectionStream(int fd, ssl_st* ssl, std::string request, std::string remote_ip, int remote_port,
                   Clock::time_point write_deadline);

  bool is_readable() const override { return read_pos_ < request_.size(); }
  bool is_writable() const override { return !write_failed_; }
  ssize_t read(char* ptr, size_t size) override;
  // All `size` bytes, or -1 (the client went away or did not read them by the deadline).
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  // -1: cpp-httplib asks only to refuse descriptors that select() cannot watch; this stream
  // never selects (it polls), so no descriptor is refused for its number.
  socket_t socket() const override { return -1; }

  bool write_failed() const { return write_failed_; }

 private:
  // Waits until the socket is readable (`events` POLLIN) or writable (POLLOUT) or the
  // deadline passes; false on the deadline or an error.
  bool Wait(short events) const;

  int fd_;
  ssl_st* ssl_;
  std::string request_;
  size_t read_pos_ = 0;
  std::string remote_ip_;
  int remote_port_;
  Clock::time_point write_deadline_;
  bool write_failed_ = false;
};

}  // namespace perftracker
