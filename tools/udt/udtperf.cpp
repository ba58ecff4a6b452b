// udtperf: one-file UDT4 transfer peer for `slipstream bench transfer`.
//
//   udtperf recv PORT OUTFILE   listen on 0.0.0.0:PORT, take one connection,
//                               write the stream to OUTFILE as it arrives
//   udtperf send HOST PORT FILE connect and send FILE
//
// Wire format: 8-byte big-endian length, then that many bytes of file data,
// then the receiver answers with one byte ('K') once every byte has been
// written to OUTFILE. The sender only reports success after that byte, so a
// zero exit on the sender means the receiver really has the whole file.
//
// Each side prints one JSON line on stdout when it succeeds. Errors go to
// stderr and the exit status is 1 (2 for bad arguments).
//
// SPDX-License-Identifier: MIT OR Apache-2.0

#include <udt/udt.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Socket options, applied to every UDT socket before bind/listen/connect.
//
// UDT_MSS counts the whole IP packet: UDT sends (MSS - 28)-byte UDP payloads
// (20 bytes IPv4 + 8 bytes UDP), of which 16 bytes are the UDT header, so
// 1500 gives 1500-byte IP packets carrying 1456 bytes of data. 1500 is also
// the library default; we set it explicitly because the emulated links have
// MTU 1500 and the flow/buffer sizes below are converted using it.
constexpr int kMss = 1500;
constexpr int kPayload = kMss - 28 - 16;
// UDT_SNDBUF / UDT_RCVBUF: bytes, converted by the library to packets of
// (MSS - 28). The defaults (8192 packets, ~12 MB) cap a 1 Gbit/s x 200 ms
// path (25 MB in flight); 64 MiB leaves room for loss recovery on top.
constexpr int kBufBytes = 64 << 20;
// UDT_FC: maximum flight size in packets. The library clamps UDT_RCVBUF to
// it (so it must be set first) and advertises min(FC, RCVBUF) as the flow
// window: sized to hold the whole 64 MiB buffer (~46k packets, >= the
// ~17k packets needed for 25 MB in flight).
constexpr int kFlowWindow = kBufBytes / kPayload + 1;
// UDP_SNDBUF / UDP_RCVBUF: kernel socket buffers. The kernel silently caps
// them at net.core.{w,r}mem_max; see enlarge_kernel_buffers() for the rest.
// Linger: on close, wait (bounded) for unacknowledged data to be delivered.
constexpr int kLingerSec = 3;
// Give up when nothing moves for this long. libudt 4.11 only declares a
// silent peer dead after ~45 s (17 keep-alive expirations with a growing
// interval), so this is what makes a killed peer fail in bounded time.
constexpr int kStallMs = 20000;
// ~1 MiB, a whole number of packets: UDT packetises each send() call on its
// own, so a chunk that is not a multiple of the payload ends in a short packet.
constexpr size_t kChunk = 720 * kPayload;
constexpr char kDone = 'K';

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Exit without running static destructors: UDT's background threads may
// still be running and the library's global state is not safe to tear down
// under them.
[[noreturn]] void fail(const std::string& msg) {
    std::fprintf(stderr, "udtperf: %s\n", msg.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
}

// libudt 4.11 words its timeout error as "Non-blocking call failure.", so
// spell that case out.
[[noreturn]] void fail_udt(const std::string& what) {
    UDT::ERRORINFO& e = UDT::getlasterror();
    if (e.getErrorCode() == CUDTException::ETIMEOUT)
        fail(what + ": no progress for " + std::to_string(kStallMs / 1000) + " s (peer stalled or gone)");
    fail(what + ": " + e.getErrorMessage());
}

[[noreturn]] void fail_sys(const std::string& what) {
    fail(what + ": " + std::strerror(errno));
}

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: udtperf recv PORT OUTFILE\n"
                 "       udtperf send HOST PORT FILE\n");
    std::exit(2);
}

uint16_t parse_port(const char* s) {
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > 65535) usage();
    return static_cast<uint16_t>(v);
}

void set_opt(UDTSOCKET u, UDT::SOCKOPT opt, const void* val, int len, const char* name) {
    if (UDT::setsockopt(u, 0, opt, val, len) == UDT::ERROR) fail_udt(std::string("setsockopt ") + name);
}

void configure(UDTSOCKET u) {
    const int mss = kMss, fc = kFlowWindow, buf = kBufBytes;
    const linger lg{1, kLingerSec};
    set_opt(u, UDT_MSS, &mss, sizeof mss, "UDT_MSS");
    set_opt(u, UDT_FC, &fc, sizeof fc, "UDT_FC");  // before UDT_RCVBUF (clamped to FC)
    set_opt(u, UDT_SNDBUF, &buf, sizeof buf, "UDT_SNDBUF");
    set_opt(u, UDT_RCVBUF, &buf, sizeof buf, "UDT_RCVBUF");
    set_opt(u, UDP_SNDBUF, &buf, sizeof buf, "UDP_SNDBUF");
    set_opt(u, UDP_RCVBUF, &buf, sizeof buf, "UDP_RCVBUF");
    set_opt(u, UDT_LINGER, &lg, sizeof lg, "UDT_LINGER");
}

// UDT sets SO_SNDBUF/SO_RCVBUF itself, which the kernel caps at
// net.core.{w,r}mem_max (often only 208 KiB). If that cap bit, try the
// privileged *BUFFORCE variants (they work as root, e.g. under
// `ip netns exec`); UDTPERF_NO_FORCE=1 disables this. The sizes finally in
// effect are reported in the JSON line (as getsockopt reports them, i.e.
// doubled by the kernel).
struct KernelBufs {
    int snd = 0, rcv = 0;
};

KernelBufs enlarge_kernel_buffers(int fd) {
    const char* no_force = std::getenv("UDTPERF_NO_FORCE");
    const bool force = !(no_force && *no_force && std::strcmp(no_force, "0") != 0);
    KernelBufs kb;
    const struct {
        int opt, force_opt;
        int* out;
    } bufs[] = {{SO_SNDBUF, SO_SNDBUFFORCE, &kb.snd}, {SO_RCVBUF, SO_RCVBUFFORCE, &kb.rcv}};
    for (const auto& b : bufs) {
        socklen_t len = sizeof(int);
        getsockopt(fd, SOL_SOCKET, b.opt, b.out, &len);
        if (force && *b.out < kBufBytes) {
            const int want = kBufBytes;
            setsockopt(fd, SOL_SOCKET, b.force_opt, &want, sizeof want);  // EPERM is fine
            len = sizeof(int);
            getsockopt(fd, SOL_SOCKET, b.opt, b.out, &len);
        }
    }
    return kb;
}

// Create the UDP socket ourselves (so its buffers can be inspected and
// enlarged) and hand it to UDT. UDT owns and closes it from here on.
KernelBufs bind_udp(UDTSOCKET u, uint16_t port) {
    int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0) fail_sys("socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
        fail_sys("bind UDP 0.0.0.0:" + std::to_string(port));
    if (UDT::bind2(u, fd) == UDT::ERROR) fail_udt("UDT bind");
    return enlarge_kernel_buffers(fd);  // after bind2, which sets its own sizes
}

void send_all(UDTSOCKET u, const char* p, size_t n, const std::string& what) {
    while (n > 0) {
        int r = UDT::send(u, p, static_cast<int>(n), 0);
        if (r == UDT::ERROR) fail_udt(what);
        p += r;
        n -= static_cast<size_t>(r);
    }
}

int recv_cmd(const char* port_s, const char* path) {
    const uint16_t port = parse_port(port_s);
    int out = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) fail_sys(std::string("open ") + path);

    UDT::startup();
    UDTSOCKET l = UDT::socket(AF_INET, SOCK_STREAM, 0);
    if (l == UDT::INVALID_SOCK) fail_udt("socket");
    configure(l);
    const KernelBufs kb = bind_udp(l, port);
    if (UDT::listen(l, 1) == UDT::ERROR) fail_udt("listen");
    std::fprintf(stderr, "listening\n");
    std::fflush(stderr);

    sockaddr_in peer{};
    int peer_len = sizeof peer;
    UDTSOCKET u = UDT::accept(l, reinterpret_cast<sockaddr*>(&peer), &peer_len);
    if (u == UDT::INVALID_SOCK) fail_udt("accept");
    const auto t0 = Clock::now();
    const int stall = kStallMs;
    set_opt(u, UDT_RCVTIMEO, &stall, sizeof stall, "UDT_RCVTIMEO");

    unsigned char hdr[8];
    for (size_t got = 0; got < sizeof hdr;) {
        int r = UDT::recv(u, reinterpret_cast<char*>(hdr) + got, static_cast<int>(sizeof hdr - got), 0);
        if (r == UDT::ERROR) fail_udt("receiving length header");
        got += static_cast<size_t>(r);
    }
    uint64_t size = 0;
    for (unsigned char b : hdr) size = (size << 8) | b;

    // Every chunk goes straight to write(2): the file grows as data arrives
    // and its size is meaningful even if we are killed mid-transfer.
    std::vector<char> buf(kChunk);
    uint64_t got = 0;
    while (got < size) {
        const uint64_t want = std::min<uint64_t>(kChunk, size - got);
        int r = UDT::recv(u, buf.data(), static_cast<int>(want), 0);
        if (r == UDT::ERROR)
            fail_udt("transfer incomplete (" + std::to_string(got) + " of " + std::to_string(size) +
                     " bytes)");
        for (int off = 0; off < r;) {
            ssize_t w = ::write(out, buf.data() + off, static_cast<size_t>(r - off));
            if (w < 0) {
                if (errno == EINTR) continue;
                fail_sys(std::string("write ") + path);
            }
            off += static_cast<int>(w);
        }
        got += static_cast<uint64_t>(r);
    }
    const double secs = since(t0);
    if (::close(out) != 0) fail_sys(std::string("close ") + path);

    UDT::TRACEINFO pm{};
    if (UDT::perfmon(u, &pm, false) == UDT::ERROR) fail_udt("perfmon");
    char done = kDone;
    if (UDT::send(u, &done, 1, 0) != 1)
        std::fprintf(stderr, "udtperf: warning: could not confirm completion to sender: %s\n",
                     UDT::getlasterror().getErrorMessage());
    std::printf(
        "{\"role\":\"recv\",\"bytes\":%llu,\"seconds\":%.6f,\"mbps\":%.3f,\"pkts_recv\":%lld,"
        "\"pkts_lost\":%d,\"naks_sent\":%d,\"acks_sent\":%d,\"rtt_ms\":%.3f,\"mss\":%d,"
        "\"udp_sndbuf\":%d,\"udp_rcvbuf\":%d}\n",
        static_cast<unsigned long long>(size), secs, secs > 0 ? size * 8.0 / secs / 1e6 : 0.0,
        static_cast<long long>(pm.pktRecvTotal), pm.pktRcvLossTotal, pm.pktSentNAKTotal,
        pm.pktSentACKTotal, pm.msRTT, kMss, kb.snd, kb.rcv);
    std::fflush(stdout);

    UDT::close(u);  // lingers (bounded) until the confirmation byte is acknowledged
    UDT::close(l);
    UDT::cleanup();
    return 0;
}

int send_cmd(const char* host, const char* port_s, const char* path) {
    parse_port(port_s);  // validate; getaddrinfo takes the string
    int in = ::open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0) fail_sys(std::string("open ") + path);
    struct stat st{};
    if (::fstat(in, &st) != 0) fail_sys(std::string("stat ") + path);
    if (!S_ISREG(st.st_mode)) fail(std::string(path) + ": not a regular file");
    const uint64_t size = static_cast<uint64_t>(st.st_size);

    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* ai = nullptr;
    if (int e = ::getaddrinfo(host, port_s, &hints, &ai); e != 0)
        fail(std::string("resolve ") + host + ": " + gai_strerror(e));

    UDT::startup();
    UDTSOCKET u = UDT::socket(AF_INET, SOCK_STREAM, 0);
    if (u == UDT::INVALID_SOCK) fail_udt("socket");
    configure(u);
    const int stall = kStallMs;
    set_opt(u, UDT_SNDTIMEO, &stall, sizeof stall, "UDT_SNDTIMEO");
    const KernelBufs kb = bind_udp(u, 0);
    if (UDT::connect(u, ai->ai_addr, static_cast<int>(ai->ai_addrlen)) == UDT::ERROR)
        fail_udt(std::string("connect to ") + host + ":" + port_s);
    ::freeaddrinfo(ai);
    const auto t0 = Clock::now();

    char hdr[8];
    for (int i = 0; i < 8; ++i) hdr[i] = static_cast<char>(size >> (56 - 8 * i));
    send_all(u, hdr, sizeof hdr, "sending length header");

    std::vector<char> buf(kChunk);
    for (uint64_t sent = 0; sent < size;) {
        ssize_t n = ::read(in, buf.data(), buf.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_sys(std::string("read ") + path);
        }
        if (n == 0) fail(std::string(path) + ": file shrank while sending");
        n = static_cast<ssize_t>(std::min<uint64_t>(static_cast<uint64_t>(n), size - sent));
        send_all(u, buf.data(), static_cast<size_t>(n),
                 "send failed after " + std::to_string(sent) + " bytes queued");
        sent += static_cast<uint64_t>(n);
    }
    ::close(in);

    // Everything is queued in UDT's send buffer; wait for the receiver's
    // confirmation. Poll once a second so a stuck (but not broken)
    // connection is noticed: fail if the send buffer stops draining.
    const int poll_ms = 1000;
    set_opt(u, UDT_RCVTIMEO, &poll_ms, sizeof poll_ms, "UDT_RCVTIMEO");
    int32_t last_queued = -1;
    auto last_progress = Clock::now();
    for (;;) {
        char c = 0;
        int r = UDT::recv(u, &c, 1, 0);
        if (r == 1) {
            if (c != kDone) fail("unexpected confirmation byte from receiver");
            break;
        }
        if (UDT::getlasterror().getErrorCode() != CUDTException::ETIMEOUT)
            fail_udt("waiting for receiver to confirm");
        int32_t queued = 0;
        int qlen = sizeof queued;
        if (UDT::getsockopt(u, 0, UDT_SNDDATA, &queued, &qlen) == UDT::ERROR)
            fail_udt("waiting for receiver to confirm");
        if (queued != last_queued) {
            last_queued = queued;
            last_progress = Clock::now();
        } else if (since(last_progress) * 1000 > kStallMs) {
            fail("no confirmation from receiver (" + std::to_string(queued) +
                 " packets still unacknowledged, no progress for " + std::to_string(kStallMs / 1000) +
                 " s)");
        }
    }
    const double secs = since(t0);

    UDT::TRACEINFO pm{};
    if (UDT::perfmon(u, &pm, false) == UDT::ERROR) fail_udt("perfmon");
    std::printf(
        "{\"role\":\"send\",\"bytes\":%llu,\"seconds\":%.6f,\"mbps\":%.3f,\"pkts_sent\":%lld,"
        "\"pkts_retrans\":%d,\"retrans_fraction\":%.6f,\"pkts_snd_loss\":%d,\"naks_recv\":%d,"
        "\"rtt_ms\":%.3f,\"mss\":%d,\"udp_sndbuf\":%d,\"udp_rcvbuf\":%d}\n",
        static_cast<unsigned long long>(size), secs, secs > 0 ? size * 8.0 / secs / 1e6 : 0.0,
        static_cast<long long>(pm.pktSentTotal), pm.pktRetransTotal,
        pm.pktSentTotal > 0 ? static_cast<double>(pm.pktRetransTotal) / pm.pktSentTotal : 0.0,
        pm.pktSndLossTotal, pm.pktRecvNAKTotal, pm.msRTT, kMss, kb.snd, kb.rcv);
    std::fflush(stdout);

    UDT::close(u);
    UDT::cleanup();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 4 && std::strcmp(argv[1], "recv") == 0) return recv_cmd(argv[2], argv[3]);
    if (argc == 5 && std::strcmp(argv[1], "send") == 0) return send_cmd(argv[2], argv[3], argv[4]);
    usage();
}
