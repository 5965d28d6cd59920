import java.io.ByteArrayInputStream;
import java.io.FileInputStream;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import javax.security.auth.x500.X500Principal;

/**
 * For each keystore named by its arguments (type, file, password, ...): its entries with an X.509
 * certificate as Kafka's SslFactory.CertificateEntries sees them when a keystore changes at run
 * time, one line each (alias, subject, its canonical form, which X500Principal.equals compares,
 * its RFC 2253 form, which Kafka's TLS principal names, alternative names as a HashSet, and whether those names contain the same certificate's read
 * again; tab-separated, escaped), then "--". Run by test_keystore_entries.py with the
 * JDK only.
 */
public class KeystoreEntries {
    public static void main(String[] args) throws Exception {
        CertificateFactory factory = CertificateFactory.getInstance("X.509");
        for (int i = 0; i + 2 < args.length; i += 3) {
            KeyStore store = KeyStore.getInstance(args[i]);
            try (FileInputStream in = new FileInputStream(args[i + 1])) {
                store.load(in, args[i + 2].toCharArray());
            }
            for (String alias : Collections.list(store.aliases())) {
                if (store.getCertificate(alias) instanceof X509Certificate certificate) {
                    X509Certificate again = (X509Certificate) factory.generateCertificate(
                        new ByteArrayInputStream(certificate.getEncoded()));
                    Set<List<?>> names = names(certificate);
                    System.out.println(String.join("\t", escaped(alias),
                        escaped(certificate.getSubjectX500Principal().toString()),
                        escaped(certificate.getSubjectX500Principal().getName(X500Principal.CANONICAL)),
                        escaped(certificate.getSubjectX500Principal().getName()),
                        escaped(names.toString()),
                        String.valueOf(names(again).containsAll(names))));
                }
            }
            System.out.println("--");
        }
    }

    /** A field on one line: backslashes, tabs and line ends escaped with a backslash. */
    private static String escaped(String text) {
        return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n");
    }

    private static Set<List<?>> names(X509Certificate certificate) throws Exception {
        Collection<List<?>> names = certificate.getSubjectAlternativeNames();
        return names != null ? new HashSet<>(names) : Collections.emptySet();
    }
}
