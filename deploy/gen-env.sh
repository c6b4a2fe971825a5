#!/usr/bin/env sh
# Write deploy/.env from .env.example with a freshly generated ELASTIC_PASSWORD.
# The password is never printed. Refuses to overwrite an existing .env unless --force.
set -eu
cd "$(dirname "$0")"
if [ -e .env ] && [ "${1:-}" != "--force" ]; then
    echo ".env already exists; keeping it (use --force to replace it and its password)" >&2
    exit 1
fi
# 32 URL-safe characters from the kernel's CSPRNG (no openssl or python needed).
password=$(LC_ALL=C tr -dc 'A-Za-z0-9_-' </dev/urandom | head -c 32)
[ ${#password} -eq 32 ] || { echo "could not generate a password" >&2; exit 1; }
umask 077
tmp=$(mktemp .env.XXXXXX)
sed "s|^ELASTIC_PASSWORD=.*|ELASTIC_PASSWORD=${password}|" .env.example >"$tmp"
chmod 600 "$tmp"
mv "$tmp" .env
echo "wrote $(pwd)/.env (mode 600) with a new ELASTIC_PASSWORD"
echo "next: docker compose up -d   (then see the header of docker-compose.yml or docs/SPARSE.md)"
