package valkeystore_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/lambdakit/lambdakit/internal/redisserver"
	"github.com/lambdakit/lambdakit/lambdakit"
	"github.com/lambdakit/lambdakit/lambdakit/storetest"
	"github.com/lambdakit/lambdakit/valkeystore"
)

// The store over TLS, as ElastiCache with in-transit encryption serves it:
// a real redis-server with a TLS port and a certificate from a CA made
// here; the client trusts that CA only. The contract holds over it, and a
// client without TLS cannot talk to that port.
func TestStoreContractOverTLS(t *testing.T) {
	dir := t.TempDir()
	pool := writeCerts(t, dir)
	port := freeLoopbackPort(t)
	// The plain port stays for the harness's own PING and setup.
	srv := redisserver.ForTest(t,
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", filepath.Join(dir, "server.pem"),
		"--tls-key-file", filepath.Join(dir, "server-key.pem"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.pem"),
		"--tls-auth-clients", "no")
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := valkey.NewClient(valkeystore.WithLambdaDefaults(valkey.ClientOption{
		InitAddress: []string{addr},
		TLSConfig:   &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
	}))
	if err != nil {
		t.Fatalf("TLS client to %s: %v\nserver output:\n%s", addr, err, srv.Output())
	}
	t.Cleanup(c.Close)
	s := newStore(t, c)
	storetest.RunStoreContract(t, func(*testing.T) lambdakit.Store { return s })

	if plain, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, Dialer: net.Dialer{Timeout: time.Second}, ConnWriteTimeout: time.Second}); err == nil {
		plain.Close()
		t.Error("a client without TLS connected to the TLS port; want an error")
	}
}

// writeCerts writes a CA and a server certificate for 127.0.0.1 into dir
// and returns a pool that trusts the CA.
func writeCerts(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, srvKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lambdakit test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("server.pem", "CERTIFICATE", leafDER)
	write("server-key.pem", "EC PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool
}

// freeLoopbackPort returns a port that was free a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
