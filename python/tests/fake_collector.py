"""A stand-in for the node collector: a Unix socket server speaking docs/agent-protocol.md."""

import json
import os
import queue
import socket
import threading
import time


class FakeCollector:
    def __init__(self, path):
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(path)
        self._listener.listen(16)
        self._conns = []
        self._lock = threading.Lock()
        self._queue = queue.Queue()
        self.log = []  # every message received: (time.time(), conn index, dict)
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self):
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
                index = len(self._conns) - 1
            threading.Thread(target=self._read_loop, args=(conn, index), daemon=True).start()

    def _read_loop(self, conn, index):
        buf = b""
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                entry = (time.time(), index, msg)
                self.log.append(entry)
                self._queue.put(entry)

    def wait_for(self, type_, timeout=20.0, pred=lambda m: True):
        """The next message of `type_` matching `pred` (others stay in self.log)."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError("no %r message within %.1f s; got %s" % (
                    type_, timeout, [m["type"] for _, _, m in self.log][-20:]))
            try:
                t, index, msg = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if msg.get("type") == type_ and pred(msg):
                return t, index, msg

    def messages(self, type_):
        return [m for _, _, m in self.log if m.get("type") == type_]

    def send(self, msg, index=-1):
        with self._lock:
            conn = self._conns[index]
        conn.sendall((json.dumps(msg) + "\n").encode())

    def send_raw(self, data, index=-1):
        """Bytes as they are: no JSON, no newline added (a broken or foreign peer)."""
        with self._lock:
            conn = self._conns[index]
        conn.sendall(data)

    def kill(self):
        """Vanishes like a crashed collector: listener and connections closed, path removed."""
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            for c in self._conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                    c.close()
                except OSError:
                    pass
        if os.path.exists(self.path):
            os.unlink(self.path)
