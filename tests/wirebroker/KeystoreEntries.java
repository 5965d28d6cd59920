import java.io.FileInputStream;
import java.security.KeyStore;
import java.security.cert.X509Certificate;
import java.util.Collections;

/**
 * For each keystore named by its arguments (type, file, password, ...): how many of its entries
 * have an X.509 certificate, the number Kafka's SslFactory compares when a keystore changes at run
 * time. Run by test_keystore_entries.py with the JDK only.
 */
public class KeystoreEntries {
    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 2 < args.length; i += 3) {
            KeyStore store = KeyStore.getInstance(args[i]);
            try (FileInputStream in = new FileInputStream(args[i + 1])) {
                store.load(in, args[i + 2].toCharArray());
            }
            int count = 0;
            for (String alias : Collections.list(store.aliases())) {
                if (store.getCertificate(alias) instanceof X509Certificate) {
                    count++;
                }
            }
            System.out.println(count);
        }
    }
}
