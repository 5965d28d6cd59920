import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.URIParameter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import javax.security.auth.login.AppConfigurationEntry;
import javax.security.auth.login.Configuration;

/**
 * Java's reading of JAAS configurations, for tests/wirebroker/jaas_java.py.
 * {@code JaasConfig file SECTION FILE...} reads each FILE with the JDK's ConfigFile (its
 * {@code ${property}} expansion as the JVM's system and security properties say) and takes its
 * SECTION. {@code JaasConfig kafka FILE...} reads each FILE's text (UTF-8) as a
 * {@code sasl.jaas.config} value with Kafka's JaasContext, as a client does (the kafka-clients jar
 * on the class path, reached by reflection so that the file mode needs no jar).
 * <p>
 * One line a FILE: its login modules separated by a tab, {@code |} and a tab, each as its class
 * name, control flag and options {@code key=value} (by key), separated by tabs; {@code NONE} when
 * there is no SECTION; or {@code ERROR}, a tab and the message of the exception's last cause.
 * Each UTF-16 unit that is not printable ASCII, and the backslash, is written as Java writes it
 * in source: a backslash, {@code u} and its four hex digits.
 */
public class JaasConfig {
    public static void main(String[] args) {
        boolean kafka = args[0].equals("kafka");
        for (int i = kafka ? 1 : 2; i < args.length; i++) {
            String line;
            try {
                List<AppConfigurationEntry> entries = kafka ? kafka(args[i]) : file(args[1], args[i]);
                line = entries == null ? "NONE" : format(entries);
            } catch (Exception e) {
                Throwable cause = e;
                while (cause.getCause() != null) {
                    cause = cause.getCause();
                }
                line = "ERROR\t" + escaped(String.valueOf(cause.getMessage()));
            }
            System.out.println(line);
        }
    }

    static List<AppConfigurationEntry> file(String section, String path) throws Exception {
        Configuration config = Configuration.getInstance(
            "JavaLoginConfig", new URIParameter(new File(path).toURI()));
        AppConfigurationEntry[] entries = config.getAppConfigurationEntry(section);
        return entries == null ? null : Arrays.asList(entries);
    }

    @SuppressWarnings("unchecked")
    static List<AppConfigurationEntry> kafka(String path) throws Exception {
        Object value = Class.forName("org.apache.kafka.common.config.types.Password")
            .getConstructor(String.class)
            .newInstance(Files.readString(Path.of(path)));
        Class<?> jaasContext = Class.forName("org.apache.kafka.common.security.JaasContext");
        Object context = jaasContext.getMethod("loadClientContext", Map.class)
            .invoke(null, Map.of("sasl.jaas.config", value));
        return (List<AppConfigurationEntry>) jaasContext.getMethod("configurationEntries").invoke(context);
    }

    static String format(List<AppConfigurationEntry> entries) {
        List<String> modules = new ArrayList<>();
        for (AppConfigurationEntry entry : entries) {
            String flag = entry.getControlFlag().toString(); // "LoginModuleControlFlag: required"
            StringBuilder module = new StringBuilder(escaped(entry.getLoginModuleName()))
                .append('\t').append(flag.substring(flag.indexOf(' ') + 1));
            // An option named by a number or a character such as '*' is under null in Kafka's
            // options, where no login module looks: wirebroker leaves it out, so it is not shown.
            TreeMap<String, Object> options = new TreeMap<>();
            entry.getOptions().forEach((key, value) -> {
                if (key != null) {
                    options.put(key, value);
                }
            });
            options.forEach((key, value) -> module.append('\t').append(escaped(key))
                .append('=').append(escaped(String.valueOf(value))));
            modules.add(module.toString());
        }
        return String.join("\t|\t", modules);
    }

    static String escaped(String text) {
        StringBuilder out = new StringBuilder();
        for (char c : text.toCharArray()) {
            if (c < ' ' || c > '~' || c == '\\') {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.toString();
    }
}
