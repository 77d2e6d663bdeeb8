// RequestProcessor: cpp-httplib's routing and HTTP parsing, without its listener. The server
// registers its routes on it as on any httplib::Server, and ConnectionGate's handler threads
// call Process() with a complete request: httplib's own accept loop, whose reads block a
// pool thread on every slow client, never runs.
#pragma once

#include <httplib.h>

namespace perftracker {

class RequestProcessor : public httplib::Server {
 public:
  // Parses the request on `stream`, routes it and writes the answer. `last`: answer with
  // "Connection: close". Returns whether the connection may carry another request.
  bool Process(httplib::Stream& stream, bool last) {
    bool client_closes = false;
    const bool ok = process_request(stream, last, client_closes, nullptr);
    return ok && !client_closes;
  }
};

}  // namespace perftracker
