import java.io.FileInputStream;
import java.net.InetAddress;
import java.security.KeyStore;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLServerSocket;
import javax.net.ssl.SSLSocket;

/**
 * A TLS server on 127.0.0.1 from a keystore (arguments: type, file, password and optionally the
 * key password, Kafka's ssl.key.password), with the key manager Kafka's DefaultSslEngineFactory
 * makes by default (KeyManagerFactory's default algorithm, SunX509, given the store and the key
 * password, else the store's): prints its port, then completes each handshake it accepts and
 * writes one byte, until it is killed. Run by test_keystore_keys.py with the JDK only.
 */
public class KeystoreServer {
    public static void main(String[] args) throws Exception {
        KeyStore store = KeyStore.getInstance(args[0]);
        try (FileInputStream in = new FileInputStream(args[1])) {
            store.load(in, args[2].toCharArray());
        }
        KeyManagerFactory factory =
            KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        factory.init(store, args[args.length > 3 ? 3 : 2].toCharArray());
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(factory.getKeyManagers(), null, null);
        SSLServerSocket server = (SSLServerSocket) context.getServerSocketFactory()
            .createServerSocket(0, 50, InetAddress.getLoopbackAddress());
        System.out.println(server.getLocalPort());
        System.out.flush();
        while (true) {
            try (SSLSocket socket = (SSLSocket) server.accept()) {
                socket.startHandshake();
                socket.getOutputStream().write(1);
                socket.getOutputStream().flush();
            } catch (java.io.IOException e) {
                System.err.println(e);
            }
        }
    }
}
