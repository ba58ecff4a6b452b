// What the least a file transfer over UDP can cost on this machine, without a protocol:
// one thread each end, no reliability, no pacing, a window of datagrams acknowledged every 32.
// The floor slipstream is measured against on loopback (docs/benchmarks.md), built and run by
// scripts/probe-udp-file.sh.
//
//   probe-udp-file recv MODE PORT OUT SIZE PAYLOAD    MODE: buf | map | null
//   probe-udp-file send MODE PORT IN PAYLOAD WINDOW   MODE: copy | splice, +nohash
//
// recv buf:  recvmmsg 16 datagrams into a 1 MiB buffer, XXH3-128 them, one writev to OUT.
// recv map:  the datagrams land straight in OUT mapped (MADV_POPULATE_WRITE ahead), hashed.
// recv null: received and hashed, not written.
// send copy: the file mapped, each 1 MiB hashed, then sendmmsg from the mapping (the kernel
//            copies each datagram); splice: header with MSG_MORE, then sendfile (no copy).
// Datagrams are a 16-byte header (the sequence number) and PAYLOAD bytes of the file; the
// receiver exits on the first out-of-order one (loopback with a big socket buffer drops none).
// Each end prints its wall time, rate and CPU (user + system) per GB, and the digest.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define BATCH 16
#define ACK_EVERY 32

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void report(const char *who, const char *mode, double t0, uint64_t bytes, XXH3_state_t *st) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double wall = now() - t0;
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec / 1e6;
    XXH128_hash_t h = XXH3_128bits_digest(st);
    printf("%s %s: %.3f s, %.2f Gbit/s, %.3f CPU s/GB, xxh128 %016llx%016llx\n", who, mode, wall,
           bytes * 8 / wall / 1e9, cpu / (bytes / 1e9), (unsigned long long)h.high64,
           (unsigned long long)h.low64);
}

static int udp(int port, int bind_it) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    int big = 64 << 20;
    setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if ((bind_it ? bind(s, (void *)&a, sizeof a) : connect(s, (void *)&a, sizeof a)) != 0) {
        perror(bind_it ? "bind" : "connect");
        exit(1);
    }
    return s;
}

static int recv_side(const char *mode, int port, const char *out, uint64_t size, uint64_t pay) {
    int s = udp(port, 1);
    int fd = open(out, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(out); return 1; }
    int map_mode = !strcmp(mode, "map"), write_mode = !strcmp(mode, "buf");
    uint64_t npk = (size + pay - 1) / pay;
    char *map = NULL;
    if (map_mode) {
        if (ftruncate(fd, size) != 0) { perror("ftruncate"); return 1; }
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) { perror("mmap"); return 1; }
    }
    char *buf = aligned_alloc(4096, BATCH * pay + 4096);
    memset(buf, 0, BATCH * pay);
    char heads[BATCH][16];
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH][2], w[BATCH];
    struct sockaddr_in peer;
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    uint64_t next = 0, populated = 0, acked = 0, page_end = (size + 4095) & ~4095ULL;
    double t0 = 0;
    while (next < npk) {
        if (map_mode && (next + 2 * BATCH) * pay > populated && populated < page_end) {
            uint64_t to = (next + 2 * BATCH) * pay + (1 << 20);
            to = to > page_end ? page_end : (to & ~4095ULL);
            if (madvise(map + populated, to - populated, MADV_POPULATE_WRITE) != 0)
                perror("madvise");
            populated = to;
        }
        for (int i = 0; i < BATCH; i++) {
            uint64_t k = next + i;
            uint64_t len = k + 1 == npk ? size - k * pay : pay;
            iov[i][0] = (struct iovec){heads[i], 16};
            iov[i][1] = map_mode && k < npk ? (struct iovec){map + k * pay, len}
                                            : (struct iovec){buf + i * pay, pay};
            m[i].msg_hdr = (struct msghdr){.msg_name = &peer, .msg_namelen = sizeof peer,
                                           .msg_iov = iov[i], .msg_iovlen = 2};
        }
        int n = recvmmsg(s, m, BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) { perror("recvmmsg"); return 1; }
        if (t0 == 0) t0 = now();
        for (int i = 0; i < n; i++, next++) {
            uint32_t seq;
            memcpy(&seq, heads[i], 4);
            if (seq != (uint32_t)next) {
                fprintf(stderr, "datagram %u arrived where %llu was due\n", seq,
                        (unsigned long long)next);
                return 1;
            }
            size_t len = m[i].msg_len - 16;
            XXH3_128bits_update(st, map_mode ? map + next * pay : buf + i * pay, len);
            w[i] = (struct iovec){buf + i * pay, len};
        }
        if (write_mode) {
            ssize_t want = 0;
            for (int i = 0; i < n; i++) want += w[i].iov_len;
            if (writev(fd, w, n) != want) { perror("writev"); return 1; }
        }
        if (next - acked >= ACK_EVERY || next == npk) {
            uint64_t v = next;
            sendto(s, &v, sizeof v, 0, (void *)&peer, sizeof peer);
            acked = next;
        }
    }
    if (map_mode) munmap(map, size);
    close(fd);
    report("recv", mode, t0, size, st);
    return 0;
}

static int send_side(const char *mode, int port, const char *in, uint64_t pay, uint64_t win) {
    int fd = open(in, O_RDONLY);
    if (fd < 0) { perror(in); return 1; }
    struct stat sb;
    fstat(fd, &sb);
    uint64_t size = sb.st_size, npk = (size + pay - 1) / pay;
    char *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { perror("mmap"); return 1; }
    int s = udp(port, 0);
    int splice = strstr(mode, "splice") != NULL, hash = strstr(mode, "nohash") == NULL;
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    uint64_t next = 0, acked = 0, hashed = 0;
    char heads[BATCH][16] = {{0}};
    struct mmsghdr m[BATCH];
    struct iovec iov[BATCH][2];
    double t0 = now();
    while (acked < npk) {
        // Acknowledgements: wait for one while the window is full or all is sent.
        for (;;) {
            uint64_t v;
            int wait = next - acked >= win || next == npk;
            if (recv(s, &v, sizeof v, wait ? 0 : MSG_DONTWAIT) != sizeof v) break;
            if (v > acked) acked = v;
            if (acked >= npk || next - acked < win) break;
        }
        uint64_t room = acked + win - next;
        room = room > BATCH ? BATCH : room;
        room = next + room > npk ? npk - next : room;
        if (room == 0) continue;
        uint64_t end = (next + room) * pay;
        end = end > size ? size : end;
        if (hash && end > hashed) {
            uint64_t to = hashed + (1 << 20) > end ? hashed + (1 << 20) : end;
            to = to > size ? size : to;
            XXH3_128bits_update(st, map + hashed, to - hashed);
            hashed = to;
        }
        for (uint64_t i = 0; i < room; i++) {
            uint64_t k = next + i;
            uint32_t seq = k;
            size_t len = k + 1 == npk ? size - k * pay : pay;
            memcpy(heads[i], &seq, 4);
            if (splice) {
                off_t off = k * pay;
                if (send(s, heads[i], 16, MSG_MORE) != 16 || sendfile(s, fd, &off, len) != (ssize_t)len) {
                    fprintf(stderr, "send: %s (splice needs a payload of whole pages)\n", strerror(errno));
                    return 1;
                }
            }
            iov[i][0] = (struct iovec){heads[i], 16};
            iov[i][1] = (struct iovec){map + k * pay, len};
            m[i].msg_hdr = (struct msghdr){.msg_iov = iov[i], .msg_iovlen = 2};
        }
        if (!splice && sendmmsg(s, m, room, 0) != (int)room) { perror("sendmmsg"); return 1; }
        next += room;
    }
    report("send", mode, t0, size, st);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "recv"))
        return recv_side(argv[2], atoi(argv[3]), argv[4], strtoull(argv[5], NULL, 10),
                         strtoull(argv[6], NULL, 10));
    if (argc == 7 && !strcmp(argv[1], "send"))
        return send_side(argv[2], atoi(argv[3]), argv[4], strtoull(argv[5], NULL, 10),
                         strtoull(argv[6], NULL, 10));
    fprintf(stderr, "usage: %s recv buf|map|null PORT OUT SIZE PAYLOAD\n"
                    "       %s send copy|splice[nohash] PORT IN PAYLOAD WINDOW\n", argv[0], argv[0]);
    return 2;
}
