// amqp091-go over TLS against the broker that tests/interop/tls/run.sh started.
// Environment: TLS_CERTS (certs.sh's directory), TLS_PORT, TLS_USER, TLS_PASS.
package tls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func env(t *testing.T, name string) string {
	v := os.Getenv(name)
	if v == "" {
		t.Skipf("%s is not set: run tests/interop/tls/run.sh", name)
	}
	return v
}

// config trusts caFile and presents client (a certs.sh name) when not empty.
func config(t *testing.T, caFile, client string) *tls.Config {
	dir := env(t, "TLS_CERTS")
	pem, err := os.ReadFile(dir + "/" + caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if client != "" {
		cert, err := tls.LoadX509KeyPair(dir+"/"+client+".pem", dir+"/"+client+".key")
		if err != nil {
			t.Fatal(err)
		}
		// Sent whatever CAs the server names as acceptable: Go would otherwise send no
		// certificate when its issuer is not among them (the wrong-CA case).
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert, nil
		}
	}
	return cfg
}

func plainURL(t *testing.T) string {
	return fmt.Sprintf("amqps://%s:%s@localhost:%s/", env(t, "TLS_USER"), env(t, "TLS_PASS"),
		env(t, "TLS_PORT"))
}

func externalURL(t *testing.T) string {
	return fmt.Sprintf("amqps://localhost:%s/", env(t, "TLS_PORT"))
}

// roundTrip publishes one confirmed message to a fresh queue and gets it back.
func roundTrip(t *testing.T, conn *amqp.Connection) {
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := ch.PublishWithDeferredConfirm("", q.Name, true, false,
		amqp.Publishing{Body: []byte("over tls")})
	if err != nil {
		t.Fatal(err)
	}
	if !conf.Wait() {
		t.Fatal("publish was nacked")
	}
	for i := 0; i < 50; i++ {
		msg, ok, err := ch.Get(q.Name, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			if string(msg.Body) != "over tls" {
				t.Fatalf("got %q", msg.Body)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the published message never arrived")
}

func mustDial(t *testing.T, conn *amqp.Connection, err error) *amqp.Connection {
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return conn
}

func refused(t *testing.T, conn *amqp.Connection, err error) {
	if err == nil {
		conn.Close()
		t.Fatal("the broker accepted the connection")
	}
	t.Logf("refused as expected: %v", err)
	// The broker carries on: a good client still connects.
	good, err := amqp.DialTLS(plainURL(t), config(t, "ca.pem", ""))
	roundTrip(t, mustDial(t, good, err))
}

func TestPlainLoginNoClientCert(t *testing.T) {
	conn, err := amqp.DialTLS(plainURL(t), config(t, "ca.pem", ""))
	roundTrip(t, mustDial(t, conn, err))
}

func TestPlainLoginWithClientCert(t *testing.T) {
	conn, err := amqp.DialTLS(plainURL(t), config(t, "ca.pem", "client"))
	roundTrip(t, mustDial(t, conn, err))
}

func TestExternalLoginWithClientCert(t *testing.T) {
	conn, err := amqp.DialTLS_ExternalAuth(externalURL(t), config(t, "ca.pem", "client"))
	roundTrip(t, mustDial(t, conn, err))
}

func TestRefusedWrongCAClientCert(t *testing.T) {
	conn, err := amqp.DialTLS(plainURL(t), config(t, "ca.pem", "client-wrongca"))
	refused(t, conn, err)
}

func TestRefusedExpiredClientCert(t *testing.T) {
	conn, err := amqp.DialTLS(plainURL(t), config(t, "ca.pem", "client-expired"))
	refused(t, conn, err)
}

func TestRefusedServerNotTrusted(t *testing.T) {
	conn, err := amqp.DialTLS(plainURL(t), config(t, "wrongca.pem", "client"))
	refused(t, conn, err)
}

func TestRefusedExternalWithoutClientCert(t *testing.T) {
	conn, err := amqp.DialTLS_ExternalAuth(externalURL(t), config(t, "ca.pem", ""))
	refused(t, conn, err)
}
