// A JGroups 2.12 group member for nakflow's peer rows (benchmarks/jgroups_peer.py).
//
//   java -cp jgroups.jar:. Member send CONFIG CLUSTER MEMBERS SECONDS SIZE
//   java -cp jgroups.jar:. Member recv CONFIG CLUSTER SECONDS
//
// The sender waits until the view holds MEMBERS members, then multicasts SIZE-byte messages
// (8-byte seq first) as fast as the stack lets it for SECONDS, then a last message with seq
// -1. A receiver counts deliveries and samples its cumulative count every 50 ms (wall
// clock); on seq -1 or after SECONDS it prints one JSON line and leaves. The stack is the
// shipped CONFIG (udp.xml: IP multicast, UFC/MFC credit, FD_SOCK, FD_ALL, VERIFY_SUSPECT).
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.jgroups.Channel;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;

public class Member {
    static final long SAMPLE_MS = 50;

    public static void main(String[] args) throws Exception {
        if (args[0].equals("send")) {
            send(args[1], args[2], Integer.parseInt(args[3]), Double.parseDouble(args[4]),
                 Integer.parseInt(args[5]));
        } else {
            recv(args[1], args[2], Double.parseDouble(args[3]));
        }
        System.exit(0);
    }

    static void send(String config, String cluster, int members, double seconds, int size)
            throws Exception {
        JChannel ch = new JChannel(config);
        ch.setOpt(Channel.LOCAL, Boolean.FALSE);  // not our own messages
        final Object lock = new Object();
        final int[] viewSize = {0};
        final List<String> views = new ArrayList<>();
        final long t0 = System.currentTimeMillis();
        ch.setReceiver(new ReceiverAdapter() {
            public void viewAccepted(View v) {
                synchronized (lock) {
                    viewSize[0] = v.size();
                    views.add("[" + (System.currentTimeMillis() - t0) / 1000.0 + "," + v.size() + "]");
                    lock.notifyAll();
                }
            }
        });
        ch.connect(cluster);
        long waitEnd = System.currentTimeMillis() + 60_000;
        synchronized (lock) {
            while (viewSize[0] < members && System.currentTimeMillis() < waitEnd) {
                lock.wait(100);
            }
        }
        if (viewSize[0] < members) {
            System.err.println("only " + viewSize[0] + " of " + members + " members joined");
            System.exit(2);
        }
        System.err.println("READY");
        long start = System.currentTimeMillis();
        long end = start + (long) (seconds * 1000);
        long seq = 0;
        byte[] buf = new byte[size];
        while (System.currentTimeMillis() < end) {
            for (int i = 0; i < 64; i++) {
                ByteBuffer.wrap(buf).putLong(seq++);
                ch.send(new Message(null, null, buf.clone()));
            }
        }
        double sendS = (System.currentTimeMillis() - start) / 1000.0;
        byte[] last = new byte[8];
        ByteBuffer.wrap(last).putLong(-1L);
        ch.send(new Message(null, null, last));
        Thread.sleep(500);
        System.out.println("{\"system\": \"jgroups\", \"sent\": " + seq + ", \"send_s\": " + sendS
                           + ", \"started_at\": " + start / 1000.0 + ", \"views\": " + views + "}");
        System.out.flush();
        ch.close();
    }

    static void recv(String config, String cluster, double seconds) throws Exception {
        JChannel ch = new JChannel(config);
        final long[] count = {0};
        final boolean[] done = {false};
        final Object lock = new Object();
        ch.setReceiver(new ReceiverAdapter() {
            public void receive(Message msg) {
                long seq = ByteBuffer.wrap(msg.getRawBuffer(), msg.getOffset(), 8).getLong();
                synchronized (lock) {
                    if (seq < 0) {
                        done[0] = true;
                        lock.notifyAll();
                    } else {
                        count[0]++;
                    }
                }
            }
        });
        ch.connect(cluster);
        System.err.println("READY");
        StringBuilder t = new StringBuilder(), c = new StringBuilder();
        long end = System.currentTimeMillis() + (long) (seconds * 1000);
        while (true) {
            long now;
            long n;
            synchronized (lock) {
                lock.wait(SAMPLE_MS);
                now = System.currentTimeMillis();
                n = count[0];
                if (done[0] || now >= end) {
                    break;
                }
            }
            if (t.length() > 0) { t.append(','); c.append(','); }
            t.append(now / 1000.0);
            c.append(n);
        }
        System.out.println("{\"system\": \"jgroups\", \"delivered\": " + count[0]
                           + ", \"timeline\": {\"wall\": [" + t + "], \"delivered\": [" + c + "]}}");
        System.out.flush();
        ch.close();
    }
}
