#!/usr/bin/env bash
# certs.sh OUTDIR: the certificates the TLS interop tests use, made with openssl, no network.
#   ca.pem / ca.key              the test CA (trusted by the broker and the good clients)
#   server.pem / server.key      CN localhost, SAN localhost, 127.0.0.1, ::1, signed by ca
#   client.pem / client.key      CN tls-user, signed by ca (PLAIN and EXTERNAL logins)
#   wrongca.pem / wrongca.key    a second CA the broker does not trust
#   client-wrongca.pem / .key    CN tls-user, signed by wrongca
#   client-expired.pem / .key    CN tls-user, signed by ca, valid 2020-01-01 to 2020-01-02
#   client.p12, client-wrongca.p12, client-expired.p12   PKCS12 bundles, password "changeit"
#   truststore.p12               ca.pem as a PKCS12 trust store (keytool), password "changeit"
#   wrongca-truststore.p12       wrongca.pem likewise
# Re-running into the same OUTDIR makes everything anew.
set -euo pipefail

out="${1:?usage: certs.sh OUTDIR}"
mkdir -p "$out"
cd "$out"
rm -rf ca-db && mkdir ca-db && : >ca-db/index.txt && echo 1000 >ca-db/serial

# make_ca NAME CN: a self-signed CA.
make_ca() {
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" \
    -days 3650 -subj "/CN=$2" -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

# sign CA NAME CN EXT [DAYS]: a key and a certificate for CN signed by CA.
sign() {
  local ca="$1" name="$2" cn="$3" ext="$4"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" \
    -subj "/CN=$cn/O=warren-tests" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA "$ca.pem" -CAkey "$ca.key" -CAcreateserial \
    -out "$name.pem" -days 3650 -extfile <(printf '%s\n' "$ext") 2>/dev/null
  rm -f "$name.csr"
}

make_ca ca "warren test CA"
make_ca wrongca "warren wrong CA"
sign ca server localhost "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1
extendedKeyUsage=serverAuth"
sign ca client tls-user "extendedKeyUsage=clientAuth"
sign wrongca client-wrongca tls-user "extendedKeyUsage=clientAuth"

# The expired one: `openssl ca` takes an explicit start and end date in the past.
openssl req -new -newkey rsa:2048 -nodes -keyout client-expired.key -out client-expired.csr \
  -subj "/CN=tls-user/O=warren-tests" 2>/dev/null
cat >ca-db/ca.cnf <<CNF
[ca]
default_ca = test_ca
[test_ca]
database = ca-db/index.txt
serial = ca-db/serial
new_certs_dir = ca-db
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
organizationName = optional
[client_ext]
extendedKeyUsage = clientAuth
CNF
openssl ca -batch -config ca-db/ca.cnf -cert ca.pem -keyfile ca.key -in client-expired.csr \
  -out client-expired.pem -startdate 20200101000000Z -enddate 20200102000000Z \
  -extensions client_ext -notext 2>/dev/null
rm -f client-expired.csr

for name in client client-wrongca client-expired; do
  openssl pkcs12 -export -in "$name.pem" -inkey "$name.key" -out "$name.p12" \
    -passout pass:changeit -name "$name"
done
rm -f truststore.p12
if command -v keytool >/dev/null 2>&1; then
  keytool -importcert -noprompt -alias warren-test-ca -file ca.pem -keystore truststore.p12 \
    -storetype PKCS12 -storepass changeit >/dev/null 2>&1
  rm -f wrongca-truststore.p12
  keytool -importcert -noprompt -alias warren-wrong-ca -file wrongca.pem \
    -keystore wrongca-truststore.p12 -storetype PKCS12 -storepass changeit >/dev/null 2>&1
fi
chmod 644 ./*.key
echo "certs: made in $out"
