#!/usr/bin/env bash
# scripts/tls-certs.sh DIR: the certificates of the TLS tests, made fresh in
# DIR with the openssl command (no key is ever committed):
#   ca.crt ca.key             a test CA
#   server.crt server.key     signed by it, for localhost and 127.0.0.1
#   client.crt client.key     signed by it, a client certificate
#   other-ca.crt              another CA, which signed nothing here
#   stranger.crt stranger.key a client certificate signed by other-ca
# Keys are P-256 (fast to make); certificates last 2 days. With
# TLS_SERVER_KEY=rsa4096 the server's key is RSA-4096 instead (about 5 ms of
# the server's CPU a handshake: the TLS handshake floods of the tests).
set -euo pipefail
dir=${1:?usage: tls-certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
server_key() {
    case "${TLS_SERVER_KEY:-p256}" in
    rsa4096) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:4096 -out "$1" 2>/dev/null ;;
    p256) key "$1" ;;
    *) echo "TLS_SERVER_KEY: p256 or rsa4096" >&2; exit 2 ;;
    esac
}
ca() { # NAME SUBJECT
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -sha256 -days 2 -subj "/CN=$2" -out "$1.crt" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}
leaf() { # NAME CN CA EXTFILE-LINES...
    local name=$1 cn=$2 ca=$3
    shift 3
    if [ "$name" = server ]; then server_key "$name.key"; else key "$name.key"; fi
    openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
    printf '%s\n' "$@" >"$name.ext"
    openssl x509 -req -in "$name.csr" -CA "$ca.crt" -CAkey "$ca.key" -CAcreateserial -days 2 -sha256 \
        -extfile "$name.ext" -out "$name.crt" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}
ca ca "tvmq test CA"
ca other-ca "another test CA"
leaf server localhost ca "basicConstraints=CA:FALSE" "keyUsage=digitalSignature" \
    "extendedKeyUsage=serverAuth" "subjectAltName=DNS:localhost,IP:127.0.0.1"
leaf client "tvmq test client" ca "basicConstraints=CA:FALSE" "keyUsage=digitalSignature" \
    "extendedKeyUsage=clientAuth"
leaf stranger "stranger" other-ca "basicConstraints=CA:FALSE" "keyUsage=digitalSignature" \
    "extendedKeyUsage=clientAuth"
chmod 644 ./*.crt
