// The Java client (com.rabbitmq:amqp-client) over TLS against the broker run.sh started.
// Usage: java TlsCheck CERTDIR PORT USER PASS. Prints `ok NAME` or `FAIL NAME: why` per
// scenario and `java: N passed, M failed` last; exits 1 on a failure.
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultSaslConfig;
import com.rabbitmq.client.GetResponse;
import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.security.KeyStore;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

public class TlsCheck {
  static String dir;
  static int port;
  static String user;
  static String pass;
  static int passed;
  static int failed;

  interface Scenario {
    String run() throws Exception;
  }

  static KeyStore load(String file) throws Exception {
    KeyStore ks = KeyStore.getInstance("PKCS12");
    try (FileInputStream in = new FileInputStream(dir + "/" + file)) {
      ks.load(in, "changeit".toCharArray());
    }
    return ks;
  }

  /** An SSLContext trusting trustStore (a PKCS12 file) and presenting client.p12 if given. */
  static SSLContext context(String trustStore, String client) throws Exception {
    TrustManagerFactory tmf = TrustManagerFactory.getInstance("PKIX");
    tmf.init(load(trustStore));
    KeyManagerFactory kmf = null;
    if (client != null) {
      kmf = KeyManagerFactory.getInstance("PKIX");
      kmf.init(load(client + ".p12"), "changeit".toCharArray());
    }
    SSLContext ctx = SSLContext.getInstance("TLS");
    ctx.init(kmf == null ? null : kmf.getKeyManagers(), tmf.getTrustManagers(), null);
    return ctx;
  }

  static ConnectionFactory factory(SSLContext ctx, boolean external) {
    ConnectionFactory f = new ConnectionFactory();
    f.setHost("localhost");
    f.setPort(port);
    f.useSslProtocol(ctx);
    f.enableHostnameVerification();
    f.setConnectionTimeout(5000);
    f.setHandshakeTimeout(5000);
    f.setAutomaticRecoveryEnabled(false);
    if (external) {
      f.setSaslConfig(DefaultSaslConfig.EXTERNAL);
    } else {
      f.setUsername(user);
      f.setPassword(pass);
    }
    return f;
  }

  static String roundTrip(SSLContext ctx, boolean external) throws Exception {
    try (Connection conn = factory(ctx, external).newConnection("tls-check")) {
      Channel ch = conn.createChannel();
      ch.confirmSelect();
      String q = ch.queueDeclare().getQueue();
      ch.basicPublish("", q, true, null, "over tls".getBytes(StandardCharsets.UTF_8));
      ch.waitForConfirmsOrDie(5000);
      for (int i = 0; i < 50; i++) {
        GetResponse r = ch.basicGet(q, true);
        if (r != null) {
          String body = new String(r.getBody(), StandardCharsets.UTF_8);
          if (!body.equals("over tls")) throw new AssertionError("got " + body);
          return null;
        }
        Thread.sleep(100);
      }
      throw new AssertionError("the published message never arrived");
    }
  }

  static String refused(SSLContext ctx, boolean external) throws Exception {
    try (Connection conn = factory(ctx, external).newConnection("tls-check")) {
      throw new AssertionError("the broker accepted the connection");
    } catch (AssertionError e) {
      throw e;
    } catch (Exception e) {
      roundTrip(context("truststore.p12", null), false); // the broker carries on
      return "refused: " + e + "; a good client still connects afterwards";
    }
  }

  static void check(String name, Scenario s) {
    try {
      String detail = s.run();
      passed++;
      System.out.println("ok " + name + (detail == null ? "" : " (" + detail + ")"));
    } catch (Throwable e) {
      failed++;
      System.out.println("FAIL " + name + ": " + e);
    }
  }

  public static void main(String[] args) throws Exception {
    dir = args[0];
    port = Integer.parseInt(args[1]);
    user = args[2];
    pass = args[3];
    check("plain_login_no_client_cert", () -> roundTrip(context("truststore.p12", null), false));
    check("plain_login_with_client_cert",
        () -> roundTrip(context("truststore.p12", "client"), false));
    check("external_login_with_client_cert",
        () -> roundTrip(context("truststore.p12", "client"), true));
    // With EXTERNAL: Java's key manager sends no certificate whose issuer the server did not
    // name as acceptable, and a PLAIN login then succeeds (fail_if_no_peer_cert = false).
    check("refused_wrong_ca_client_cert_external",
        () -> refused(context("truststore.p12", "client-wrongca"), true));
    check("refused_expired_client_cert",
        () -> refused(context("truststore.p12", "client-expired"), false));
    check("refused_server_not_trusted",
        () -> refused(context("wrongca-truststore.p12", "client"), false));
    check("refused_external_without_client_cert",
        () -> refused(context("truststore.p12", null), true));
    System.out.println("java: " + passed + " passed, " + failed + " failed");
    System.exit(failed == 0 ? 0 : 1);
  }
}
