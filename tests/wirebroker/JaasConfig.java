import java.io.File;
import java.security.URIParameter;
import java.util.Map;
import java.util.TreeMap;
import javax.security.auth.login.AppConfigurationEntry;
import javax.security.auth.login.Configuration;

/**
 * The JDK's reading of JAAS files, for tests/wirebroker/test_jaas_expansion.py:
 * {@code JaasConfig SECTION FILE...} reads each FILE with the JDK's ConfigFile (its
 * {@code ${property}} expansion as the JVM's system and security properties say) and prints one
 * line a file: each option of SECTION's login modules as {@code key=value} separated by tabs,
 * or {@code ERROR} and the exception's message.
 */
public class JaasConfig {
    public static void main(String[] args) {
        for (int i = 1; i < args.length; i++) {
            StringBuilder line = new StringBuilder();
            try {
                Configuration config = Configuration.getInstance(
                    "JavaLoginConfig", new URIParameter(new File(args[i]).toURI()));
                for (AppConfigurationEntry entry : config.getAppConfigurationEntry(args[0])) {
                    for (Map.Entry<String, ?> option : new TreeMap<>(entry.getOptions()).entrySet()) {
                        line.append(option.getKey()).append('=').append(option.getValue()).append('\t');
                    }
                }
            } catch (Exception e) {
                Throwable cause = e;
                while (cause.getCause() != null) {
                    cause = cause.getCause();
                }
                line = new StringBuilder("ERROR\t" + cause.getMessage());
            }
            System.out.println(line.toString().replace("\n", " ").strip());
        }
    }
}
