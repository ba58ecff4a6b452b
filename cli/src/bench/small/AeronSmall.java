// The Aeron side of `slipstream bench small`: the same two measurements as slipstream's side,
// made with Aeron's Java client and an embedded media driver over UDP on loopback, so that both
// are judged by one method. Compiled and run by the bench against the aeron-all jar.
//
//   java AeronSmall rate   SIZE COUNT        THREADING IDLE
//   java AeronSmall paced  SIZE RATE SECONDS THREADING IDLE
//   java AeronSmall pingpong SIZE COUNT      THREADING IDLE
//
// THREADING is the media driver's: SHARED (one driver thread: the fair set-up on two cores) or
// DEDICATED (three). IDLE is how the driver's threads and the subscriber wait for work:
// backoff (spin, yield, then park up to 1 ms: Aeron's default) or spin (busy: Aeron's
// low-latency set-up). Prints one line of JSON.

import io.aeron.Aeron;
import io.aeron.ExclusivePublication;
import io.aeron.Subscription;
import io.aeron.driver.MediaDriver;
import io.aeron.driver.ThreadingMode;
import io.aeron.logbuffer.FragmentHandler;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.agrona.concurrent.BackoffIdleStrategy;
import org.agrona.concurrent.BusySpinIdleStrategy;
import org.agrona.concurrent.IdleStrategy;
import org.agrona.concurrent.UnsafeBuffer;

public final class AeronSmall {
    static final String CHANNEL = "aeron:udp?endpoint=localhost:20481";
    static final int STREAM = 4801;
    static final String BACK = "aeron:udp?endpoint=localhost:20482";
    static final int BACK_STREAM = 4802;
    static boolean spin;

    static IdleStrategy idle() {
        return spin ? new BusySpinIdleStrategy() : new BackoffIdleStrategy();
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        int size = Integer.parseInt(args[1]);
        ThreadingMode threading = ThreadingMode.valueOf(args[args.length - 2]);
        spin = args[args.length - 1].equals("spin");
        String dir = System.getProperty("aeron.dir");
        MediaDriver.Context dctx = new MediaDriver.Context()
            .aeronDirectoryName(dir)
            .threadingMode(threading)
            .sharedIdleStrategy(idle())
            .conductorIdleStrategy(idle())
            .senderIdleStrategy(idle())
            .receiverIdleStrategy(idle())
            .dirDeleteOnStart(true)
            .dirDeleteOnShutdown(true);
        try (MediaDriver driver = MediaDriver.launchEmbedded(dctx);
             Aeron aeron = Aeron.connect(new Aeron.Context().aeronDirectoryName(driver.aeronDirectoryName()));
             Subscription sub = aeron.addSubscription(CHANNEL, STREAM);
             ExclusivePublication pub = aeron.addExclusivePublication(CHANNEL, STREAM);
             Subscription backSub = aeron.addSubscription(BACK, BACK_STREAM);
             ExclusivePublication backPub = aeron.addExclusivePublication(BACK, BACK_STREAM)) {
            while (!pub.isConnected() || !sub.isConnected() || !backPub.isConnected() || !backSub.isConnected()) {
                Thread.sleep(1);
            }
            if (mode.equals("pingpong")) {
                pingpong(pub, sub, backPub, backSub, size, Long.parseLong(args[2]));
            } else if (mode.equals("rate")) {
                rate(pub, sub, size, Long.parseLong(args[2]));
            } else {
                paced(pub, sub, size, Long.parseLong(args[2]), Double.parseDouble(args[3]));
            }
        }
    }

    /// COUNT messages offered as fast as the publication takes them; the rate is counted at
    /// the subscriber, from the first offer to the last message received.
    static void rate(ExclusivePublication pub, Subscription sub, int size, long count) throws Exception {
        AtomicLong received = new AtomicLong();
        long[] lastAt = new long[1];
        Thread rx = new Thread(() -> {
            IdleStrategy idle = idle();
            long n = 0;
            FragmentHandler h = (buf, off, len, hdr) -> { };
            while (n < count) {
                int got = sub.poll(h, 256);
                n += got;
                received.lazySet(n);
                idle.idle(got);
            }
            lastAt[0] = System.nanoTime();
        });
        rx.start();
        UnsafeBuffer msg = new UnsafeBuffer(ByteBuffer.allocateDirect(size));
        IdleStrategy idle = new BackoffIdleStrategy();
        long start = System.nanoTime();
        for (long i = 0; i < count; i++) {
            while (pub.offer(msg, 0, size) < 0) {
                idle.idle();
            }
            idle.reset();
        }
        rx.join(60_000);
        long n = received.get();
        long end = n == count ? lastAt[0] : System.nanoTime();
        double secs = (end - start) / 1e9;
        System.out.printf("{\"mode\":\"rate\",\"size\":%d,\"sent\":%d,\"received\":%d,\"seconds\":%.4f,\"msgs_per_sec\":%.1f}%n",
            size, count, n, secs, n / secs);
    }

    /// RATE messages a second for SECONDS, after a second of the same not recorded (JIT
    /// compilation, first faults); each carries the moment it was meant to be sent, and the
    /// subscriber records its arrival minus that moment, so that a stall anywhere (publisher,
    /// driver, subscriber) shows as latency.
    static void paced(ExclusivePublication pub, Subscription sub, int size, long rate, double seconds) throws Exception {
        long warm = rate;
        long count = (long) (rate * seconds);
        long total = warm + count;
        long[] lat = new long[(int) count];
        AtomicLong received = new AtomicLong();
        long period = 1_000_000_000L / rate;
        Thread rx = new Thread(() -> {
            IdleStrategy idle = idle();
            int[] n = {0};
            long[] seen = {0};
            FragmentHandler h = (buf, off, len, hdr) -> {
                long now = System.nanoTime();
                seen[0]++;
                if (buf.getLong(off + 8) >= warm && n[0] < lat.length) {
                    lat[n[0]++] = now - buf.getLong(off);
                }
            };
            long deadline = System.nanoTime() + (long) ((seconds + 1) * 1e9) + 2_000_000_000L;
            while (seen[0] < total && System.nanoTime() < deadline) {
                int got = sub.poll(h, 256);
                idle.idle(got);
            }
            received.set(n[0]);
        });
        rx.start();
        UnsafeBuffer msg = new UnsafeBuffer(ByteBuffer.allocateDirect(size));
        long t0 = System.nanoTime() + 1_000_000L;
        for (long i = 0; i < total; i++) {
            long intended = t0 + i * period;
            waitUntil(intended);
            msg.putLong(0, intended);
            msg.putLong(8, i);
            while (pub.offer(msg, 0, size) < 0) {
                Thread.onSpinWait();
            }
        }
        rx.join();
        int n = (int) received.get();
        long[] got = Arrays.copyOf(lat, n);
        Arrays.sort(got);
        System.out.printf("{\"mode\":\"paced\",\"size\":%d,\"rate\":%d,\"sent\":%d,\"received\":%d,\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f}%n",
            size, rate, count, n, pct(got, 0.5), pct(got, 0.99), pct(got, 0.999), n == 0 ? 0.0 : got[n - 1] / 1e3);
    }

    /// COUNT round trips of one message after COUNT / 10 not recorded: the pinger offers, the
    /// ponger offers it back, the pinger records the round trip. Both wait with IDLE.
    static void pingpong(ExclusivePublication pub, Subscription sub, ExclusivePublication backPub,
                         Subscription backSub, int size, long count) throws Exception {
        long warm = Math.max(count / 10, 1);
        long total = warm + count;
        Thread pong = new Thread(() -> {
            IdleStrategy idle = idle();
            long[] n = {0};
            FragmentHandler h = (buf, off, len, hdr) -> {
                while (backPub.offer(buf, off, len) < 0) {
                    Thread.onSpinWait();
                }
                n[0]++;
            };
            while (n[0] < total) {
                idle.idle(sub.poll(h, 16));
            }
        });
        pong.start();
        UnsafeBuffer msg = new UnsafeBuffer(ByteBuffer.allocateDirect(size));
        long[] rtt = new long[(int) count];
        IdleStrategy idle = idle();
        int[] back = {0};
        FragmentHandler h = (buf, off, len, hdr) -> back[0]++;
        for (long i = 0; i < total; i++) {
            long t = System.nanoTime();
            while (pub.offer(msg, 0, size) < 0) {
                Thread.onSpinWait();
            }
            back[0] = 0;
            while (back[0] == 0) {
                idle.idle(backSub.poll(h, 16));
            }
            idle.reset();
            if (i >= warm) {
                rtt[(int) (i - warm)] = System.nanoTime() - t;
            }
        }
        pong.join();
        Arrays.sort(rtt);
        System.out.printf("{\"mode\":\"pingpong\",\"size\":%d,\"rate\":0,\"sent\":%d,\"received\":%d,\"p50_us\":%.2f,\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f}%n",
            size, count, count, pct(rtt, 0.5), pct(rtt, 0.99), pct(rtt, 0.999), rtt[rtt.length - 1] / 1e3);
    }

    /// Sleeps until 50 us before `at`, then spins (as slipstream's side does).
    static void waitUntil(long at) {
        long left = at - System.nanoTime();
        if (left > 50_000) {
            LockSupport.parkNanos(left - 50_000);
        }
        while (System.nanoTime() < at) {
            Thread.onSpinWait();
        }
    }

    static double pct(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0.0;
        }
        int i = (int) Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1);
        return sorted[Math.max(i, 0)] / 1e3;
    }
}
