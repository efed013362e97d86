// JavaNet.java: the JDK's networking over the shim (t_app_java): an NIO selector echo server and blocking-socket clients, com.sun.net.httpserver with java.net.http clients, and channels closed while another thread blocks on them.
import java.io.*;
import java.net.*;
import java.net.http.*;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.security.MessageDigest;
import java.util.*;
import java.util.concurrent.*;
import com.sun.net.httpserver.HttpServer;

public class JavaNet {
    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "echo-server": echoServer(a[1], Integer.parseInt(a[2])); break;
            case "echo-client": System.exit(echoClient(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]), Integer.parseInt(a[4]), Integer.parseInt(a[5]))); break;
            case "http-server": httpServer(a[1], Integer.parseInt(a[2])); break;
            case "http-client": System.exit(httpClient(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]))); break;
            case "async-close": System.exit(asyncClose(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]))); break;
            default: System.err.println("usage: JavaNet echo-server|echo-client|http-server|http-client|async-close ..."); System.exit(2);
        }
    }

    // one selector thread, non-blocking channels; "ready" once bound
    static void echoServer(String host, int port) throws IOException {
        Selector sel = Selector.open();
        ServerSocketChannel ss = ServerSocketChannel.open();
        ss.bind(new InetSocketAddress(host, port), 1024);
        ss.configureBlocking(false);
        ss.register(sel, SelectionKey.OP_ACCEPT);
        System.out.println("ready");
        while (true) {
            sel.select();
            Iterator<SelectionKey> it = sel.selectedKeys().iterator();
            while (it.hasNext()) {
                SelectionKey k = it.next();
                it.remove();
                if (!k.isValid()) continue;
                if (k.isAcceptable()) {
                    SocketChannel c = ss.accept();
                    if (c == null) continue;
                    c.configureBlocking(false);
                    c.register(sel, SelectionKey.OP_READ, ByteBuffer.allocateDirect(65536));
                } else if (k.isReadable()) {
                    SocketChannel c = (SocketChannel) k.channel();
                    ByteBuffer b = (ByteBuffer) k.attachment();
                    int n;
                    try { n = c.read(b); } catch (IOException e) { n = -1; }
                    if (n < 0) { k.cancel(); c.close(); continue; }
                    b.flip();
                    try {
                        while (b.hasRemaining()) if (c.write(b) == 0) Thread.onSpinWait();
                    } catch (IOException e) { k.cancel(); c.close(); }
                    b.clear();
                }
            }
        }
    }

    // CONNS connections from THREADS threads, each SIZE random bytes written by a second thread while the first reads the echo
    static int echoClient(String host, int port, int threads, int conns, int size) throws Exception {
        ExecutorService ex = Executors.newFixedThreadPool(threads);
        List<Future<Long>> fs = new ArrayList<>();
        for (int i = 0; i < conns; i++) {
            final int id = i;
            fs.add(ex.submit(() -> {
                byte[] out = new byte[size], in = new byte[size];
                new Random(id).nextBytes(out);
                try (Socket s = new Socket(host, port)) {
                    s.setSoTimeout(20000);
                    OutputStream os = s.getOutputStream();
                    InputStream is = s.getInputStream();
                    Thread w = new Thread(() -> {
                        try { for (int o = 0; o < size; o += 4000) os.write(out, o, Math.min(4000, size - o)); }
                        catch (IOException e) { throw new UncheckedIOException(e); }
                    });
                    w.start();
                    int got = 0;
                    while (got < size) {
                        int n = is.read(in, got, size - got);
                        if (n < 0) throw new IOException("conn " + id + ": EOF after " + got);
                        got += n;
                    }
                    w.join();
                    if (!Arrays.equals(in, out)) throw new IOException("conn " + id + ": the echo differs");
                    return (long) size;
                }
            }));
        }
        long total = 0;
        int bad = 0;
        for (Future<Long> f : fs) {
            try { total += f.get(60, TimeUnit.SECONDS); } catch (Exception e) { bad++; System.out.println("error " + e); }
        }
        ex.shutdownNow();
        System.out.println("echo-client connections " + (conns - bad) + " bytes " + total + " failed " + bad);
        return bad == 0 ? 0 : 1;
    }

    // POST /echo answers the body and its SHA-256
    static void httpServer(String host, int port) throws IOException {
        HttpServer srv = HttpServer.create(new InetSocketAddress(host, port), 1024);
        srv.createContext("/echo", x -> {
            byte[] body = x.getRequestBody().readAllBytes();
            x.getResponseHeaders().add("X-Sha256", hex(sha(body)));
            x.sendResponseHeaders(200, body.length);
            try (OutputStream os = x.getResponseBody()) { os.write(body); }
        });
        byte[] kib = new byte[1024];
        Arrays.fill(kib, (byte) 'a');
        srv.createContext("/1k", x -> {        // a 1 KiB body for wrk (scripts/bench_apps)
            x.getRequestBody().readAllBytes();
            x.sendResponseHeaders(200, kib.length);
            try (OutputStream os = x.getResponseBody()) { os.write(kib); }
        });
        srv.setExecutor(Executors.newFixedThreadPool(4));
        srv.start();
        System.out.println("ready");
    }

    // N concurrent POSTs (1 B .. 256 KiB) through java.net.http's client (NIO, its own selector thread)
    static int httpClient(String host, int port, int n) throws Exception {
        HttpClient cl = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(java.time.Duration.ofSeconds(10)).build();
        List<CompletableFuture<Boolean>> fs = new ArrayList<>();
        long sent = 0;
        for (int i = 0; i < n; i++) {
            byte[] body = new byte[1 + new Random(i).nextInt(256 * 1024)];
            new Random(i * 7 + 1).nextBytes(body);
            sent += body.length;
            HttpRequest rq = HttpRequest.newBuilder(URI.create("http://" + host + ":" + port + "/echo"))
                .timeout(java.time.Duration.ofSeconds(30)).POST(HttpRequest.BodyPublishers.ofByteArray(body)).build();
            String want = hex(sha(body));
            fs.add(cl.sendAsync(rq, HttpResponse.BodyHandlers.ofByteArray()).thenApply(r ->
                r.statusCode() == 200 && Arrays.equals(r.body(), body) && want.equals(r.headers().firstValue("X-Sha256").orElse(""))));
        }
        int ok = 0;
        for (CompletableFuture<Boolean> f : fs) {
            try { if (f.get(60, TimeUnit.SECONDS)) ok++; else System.out.println("a reply differs"); }
            catch (Exception e) { System.out.println("error " + e); }
        }
        System.out.println("http-client requests " + n + " intact " + ok + " bytes " + sent);
        return ok == n ? 0 : 1;
    }

    // a channel or socket closed while another thread blocks in it (the JDK signals that thread after
    // dup2 over its number): each blocked call ends at once, as on kernel TCP
    static int asyncClose(String host, int port, int rounds) throws Exception {
        int bad = 0;
        String[] kinds = { "channel-read", "socket-read", "channel-write", "server-accept" };
        for (String kind : kinds) {
            for (int r = 0; r < rounds; r++) {
                Closeable c;
                final String[] got = { "nothing" };
                Runnable body;
                if (kind.equals("server-accept")) {
                    ServerSocketChannel ss = ServerSocketChannel.open().bind(new InetSocketAddress(0));
                    c = ss;
                    body = () -> { try { ss.accept(); got[0] = "accepted"; } catch (IOException e) { got[0] = e.getClass().getSimpleName(); } };
                } else if (kind.equals("socket-read")) {
                    Socket s = new Socket(host, port);
                    s.getOutputStream().write('x');
                    s.getInputStream().read();
                    c = s;
                    body = () -> { try { got[0] = "read " + s.getInputStream().read(new byte[100]); } catch (IOException e) { got[0] = e.getClass().getSimpleName(); } };
                } else {
                    SocketChannel s = SocketChannel.open(new InetSocketAddress(host, port));
                    s.write(ByteBuffer.wrap(new byte[] { 'x' }));
                    s.read(ByteBuffer.allocate(1));
                    c = s;
                    boolean wr = kind.equals("channel-write");
                    // the writer's 64 MiB exceed both ends' windows: the echo server blocks once this side stops reading
                    body = () -> { try { got[0] = (wr ? "wrote " + s.write(ByteBuffer.allocateDirect(64 << 20)) : "read " + s.read(ByteBuffer.allocate(100))); } catch (IOException e) { got[0] = e.getClass().getSimpleName(); } };
                }
                Thread t = new Thread(body);
                t.start();
                Thread.sleep(200);
                long t0 = System.nanoTime();
                c.close();
                t.join(3000);
                long ms = (System.nanoTime() - t0) / 1000000;
                boolean ok = !t.isAlive() && (got[0].endsWith("Exception") || got[0].startsWith("wrote"));
                System.out.println(kind + " round " + r + ": " + (t.isAlive() ? "still blocked" : got[0]) + " after " + ms + " ms: " + (ok ? "ok" : "FAIL"));
                if (!ok) bad++;
                if (t.isAlive()) { System.out.println("async-close passed " + (kinds.length * rounds - bad) + " failed " + bad); System.out.flush(); Runtime.getRuntime().halt(1); }
            }
        }
        System.out.println("async-close passed " + (kinds.length * rounds - bad) + " failed " + bad);
        return bad == 0 ? 0 : 1;
    }

    static byte[] sha(byte[] b) {
        try { return MessageDigest.getInstance("SHA-256").digest(b); } catch (Exception e) { throw new RuntimeException(e); }
    }

    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder();
        for (byte x : b) s.append(String.format("%02x", x));
        return s.toString();
    }
}
