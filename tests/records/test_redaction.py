"""Audit redaction: every secret form in REDACTION_CORPUS leaves redact() and the audit log
without its value and with everything around it; ordinary commands pass unchanged; long
hostile strings take linear time. README "Safety" counts the forms as len(REDACTION_CORPUS).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from cli.backends.messages import ToolCall
from cli.loop.events import ToolDecided, ToolResult
from cli.records.audit import default_path
from cli.records.audit_events import AuditLog, summarise_arguments
from cli.safety.policy import Decision
from cli.safety.redaction import REDACTED, redact
from tests.conftest import RunCli
from tests.fakes.fake_ollama import FakeOllama, reply, tool_call


@pytest.fixture
def run_cli(run_cli_in_process: RunCli) -> RunCli:
    """`agent` in this process (conftest.run_in_process): no test here is about the process."""
    return run_cli_in_process


def fake(prefix: str, length: int, alphabet: str = "aB3dE5gH7jK9mN1pQ2sT4vW6yZ8cF") -> str:
    """A token of the given shape, built here so that no scanner mistakes this file for a
    leak: `prefix` and then `length` characters of `alphabet`."""
    return prefix + (alphabet * (length // len(alphabet) + 1))[:length]


GITHUB = fake("ghp_", 36)
NPM = fake("npm_", 36)
PYPI = fake("pypi-AgEIcHlwaS5vcmc", 60, "AbCdEf0123456789-_")
AWS_ID = fake("AKIA", 16, "Q7X2M9K4R8T3W5Z6")
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.c2lnbmF0dXJlLXZhbHVl"
RSA_BODY = "\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\naGVsbG8=\n"

# (id, text, secret): redact(text) must be text with `secret` (its only occurrence) replaced
# by the marker, nothing more and nothing less.
REDACTION_CORPUS: list[tuple[str, str, str]] = [
    # -- password flags ----------------------------------------------------------------------
    (
        "docker-login-p",
        "docker login -u bob -p Hunter2-docker registry.example.com",
        "Hunter2-docker",
    ),
    (
        "podman-login-p",
        "podman login --tls-verify=false -p Hunter2-podman quay.io",
        "Hunter2-podman",
    ),
    ("mysql-p-attached", "mysql -u root -pHunter2-mysql shop", "Hunter2-mysql"),
    ("mysqldump-password-eq", "mysqldump --password=Hunter2-dump shop > shop.sql", "Hunter2-dump"),
    ("password-flag", "deploy --password Hunter2-flag --user bob", "Hunter2-flag"),
    ("password-flag-equals", "deploy --password=Hunter2-equals --verbose", "Hunter2-equals"),
    (
        "password-flag-quoted",
        'deploy --password "correct horse battery" -v',
        '"correct horse battery"',
    ),
    ("passwd-flag", "chpw --passwd Hunter2-passwd bob", "Hunter2-passwd"),
    ("token-flag", "release-tool --token Hunter2-token --tag v1", "Hunter2-token"),
    ("api-key-flag", "client --api-key 9f8e7d6c5b4a39281706 list", "9f8e7d6c5b4a39281706"),
    ("secret-flag", "vaultctl put --secret Hunter2-secret", "Hunter2-secret"),
    (
        "client-secret-flag",
        "oauth --client-id app --client-secret Hunter2-client",
        "Hunter2-client",
    ),
    ("credential-flag", "sync --credential Hunter2-cred s3://bucket", "Hunter2-cred"),
    ("passphrase-flag", "gpg --batch --passphrase Hunter2-gpg -d f.gpg", "Hunter2-gpg"),
    (
        "wget-http-password",
        "wget --http-user=bob --http-password=Hunter2-wget https://x/f",
        "Hunter2-wget",
    ),
    ("sshpass-p", "sshpass -p Hunter2-sshpass ssh bob@host uptime", "Hunter2-sshpass"),
    ("redis-cli-a", "redis-cli -h cache -a Hunter2-redis ping", "Hunter2-redis"),
    ("mongosh-p", "mongosh --host db -u admin -p Hunter2-mongo", "Hunter2-mongo"),
    ("ldapsearch-w", "ldapsearch -x -D cn=admin -w Hunter2-ldap -b dc=x", "Hunter2-ldap"),
    ("ssh-keygen-N", "ssh-keygen -t ed25519 -N Hunter2-keygen -f id_ed25519", "Hunter2-keygen"),
    ("zip-P", "zip -r -P Hunter2-zip backup.zip docs", "Hunter2-zip"),
    ("keytool-storepass", "keytool -list -keystore ks.jks -storepass Hunter2-jks", "Hunter2-jks"),
    (
        "openssl-passin",
        "openssl rsa -in k.pem -passin pass:Hunter2-openssl -out k2.pem",
        "Hunter2-openssl",
    ),
    ("sqlplus-user-pass", "sqlplus scott/Hunter2-oracle@orcl @report.sql", "Hunter2-oracle"),
    ("smbclient-U", "smbclient //srv/share -U bob%Hunter2-smb -c ls", "Hunter2-smb"),
    ("twine-p", f"twine upload -u __token__ -p {PYPI} dist/*", PYPI),
    # -- key=value, key value, key: value for secret-named keys ---------------------------------
    ("env-aws-secret", f"AWS_SECRET_ACCESS_KEY={AWS_SECRET} aws s3 ls", AWS_SECRET),
    ("export-github-token", "export GITHUB_TOKEN=Hunter2-gh-token", "Hunter2-gh-token"),
    ("pgpassword", "PGPASSWORD=Hunter2-pg psql -h db -U app", "Hunter2-pg"),
    ("db-pass", "DB_PASS=Hunter2-dbpass ./migrate up", "Hunter2-dbpass"),
    ("mysql-pwd", "MYSQL_PWD=Hunter2-mysqlpwd mysql -u root", "Hunter2-mysqlpwd"),
    (
        "session-token",
        "AWS_SESSION_TOKEN=Hunter2-session aws sts get-caller-identity",
        "Hunter2-session",
    ),
    ("private-key-env", "PRIVATE_KEY=Hunter2-pk node sign.js", "Hunter2-pk"),
    ("aws-configure-set", f"aws configure set aws_secret_access_key {AWS_SECRET}", AWS_SECRET),
    ("git-config-password", "git config --global user.password Hunter2-git", "Hunter2-git"),
    (
        "npm-config-set-authtoken",
        "npm config set //registry.npmjs.org/:_authToken Hunter2-npmrc",
        "Hunter2-npmrc",
    ),
    ("yaml-password", "password: Hunter2-yaml", "Hunter2-yaml"),
    ("json-secret", '{"client_secret": "Hunter2-json", "client_id": "app"}', '"Hunter2-json"'),
    ("camel-case-key", "curl -d 'apiKey=Hunter2-camel' https://api.example/v1", "Hunter2-camel"),
    (
        "query-access-token",
        "curl 'https://api.example/v1/me?access_token=Hunter2-query&page=2'",
        "Hunter2-query",
    ),
    (
        "connection-string",
        "dotnet run 'Server=db;User Id=sa;Password=Hunter2-mssql;Encrypt=true'",
        "Hunter2-mssql",
    ),
    ("java-property", "java -Ddb.password=Hunter2-java -jar app.jar", "Hunter2-java"),
    (
        "helm-set",
        "helm install app ./chart --set auth.password=Hunter2-helm,user=bob",
        "Hunter2-helm",
    ),
    (
        "kubectl-from-literal",
        "kubectl create secret generic db --from-literal=dsn=Hunter2-k8s",
        "Hunter2-k8s",
    ),
    ("gh-secret-body", "gh secret set DEPLOY_KEY --body Hunter2-ghsecret", "Hunter2-ghsecret"),
    (
        "netrc-line",
        "echo 'machine example.org login bob password Hunter2-netrc' >> ~/.netrc",
        "Hunter2-netrc",
    ),
    (
        "xml-element",
        "echo '<server><id>repo</id><password>Hunter2-maven</password></server>' > s.xml",
        "Hunter2-maven",
    ),
    # -- HTTP headers -------------------------------------------------------------------------
    (
        "bearer-header",
        'curl -H "Authorization: Bearer tok3n-s3cret-value" https://x',
        "tok3n-s3cret-value",
    ),
    (
        "basic-header",
        "curl -H 'Authorization: Basic dXNlcjpodW50ZXIy' https://x",
        "dXNlcjpodW50ZXIy",
    ),
    (
        "proxy-authorization",
        "curl -H 'Proxy-Authorization: Basic Ym9iOmh1bnRlcjI=' https://x",
        "Ym9iOmh1bnRlcjI=",
    ),
    (
        "cookie-header",
        "curl -H 'Cookie: sid=Hunter2-cookie; theme=dark' https://x",
        "sid=Hunter2-cookie; theme=dark",
    ),
    (
        "set-cookie-header",
        "Set-Cookie: sid=Hunter2-setcookie; Path=/; HttpOnly",
        "sid=Hunter2-setcookie; Path=/; HttpOnly",
    ),
    ("x-api-key-header", "curl -H 'X-Api-Key: Hunter2-xapikey' https://x", "Hunter2-xapikey"),
    (
        "private-token-header",
        "curl --header 'PRIVATE-TOKEN: Hunter2-gitlab' https://gitlab.example/api/v4/user",
        "Hunter2-gitlab",
    ),
    (
        "git-extraheader",
        'git -c http.extraHeader="AUTHORIZATION: token Hunter2-extra" clone https://x/r.git',
        "Hunter2-extra",
    ),
    (
        "json-authorization",
        '{"headers": {"Authorization": "Bearer Hunter2-jsonhdr"}}',
        "Hunter2-jsonhdr",
    ),
    ("curl-u", "curl -u bob:Hunter2-curl https://x", "Hunter2-curl"),
    ("curl-user", "curl --user bob:Hunter2-curluser https://x", "Hunter2-curluser"),
    ("curl-cookie-flag", "curl -b 'sid=Hunter2-curlb' https://x", "'sid=Hunter2-curlb'"),
    # -- token shapes --------------------------------------------------------------------------
    ("github-ghp", f"git push https://{GITHUB}@github.com/o/r.git", GITHUB),
    ("github-gho", f"echo {fake('gho_', 36)} | gh auth login --with-token", fake("gho_", 36)),
    ("github-pat", f"echo {fake('github_pat_', 82)}", fake("github_pat_", 82)),
    ("gitlab-glpat", f"glab auth login --stdin <<< {fake('glpat-', 20)}", fake("glpat-", 20)),
    (
        "slack-xoxb",
        f"post -d text=hi {fake('xoxb-', 40, '0123456789-')}",
        fake("xoxb-", 40, "0123456789-"),
    ),
    ("openai-sk", f"echo {fake('sk-proj-', 48)} | llm keys set openai", fake("sk-proj-", 48)),
    ("anthropic-sk-ant", f"claude-cli run {fake('sk-ant-api03-', 90)}", fake("sk-ant-api03-", 90)),
    ("npm-token", f"echo {NPM} > .npm-token", NPM),
    ("pypi-token", f"echo {PYPI} > .pypi-token", PYPI),
    ("aws-akia", f"aws configure set aws_access_key_id {AWS_ID}", AWS_ID),
    (
        "aws-asia",
        f"echo {fake('ASIA', 16, 'Q7X2M9K4R8T3W5Z6')}",
        fake("ASIA", 16, "Q7X2M9K4R8T3W5Z6"),
    ),
    ("google-aiza", f"curl https://maps.example/api?k={fake('AIza', 35)}", fake("AIza", 35)),
    (
        "stripe-sk-live",
        f"stripe charges list --api {fake('sk_' + 'live_', 24)}",
        fake("sk_live_", 24),
    ),
    ("stripe-rk-live", f"echo {fake('rk_' + 'live_', 24)}", fake("rk_live_", 24)),
    ("huggingface-hf", f"huggingface-cli login {fake('hf_', 34)}", fake("hf_", 34)),
    ("jwt", f"grpcurl -rpc-header jwt:{JWT} host:443 list", JWT),
    ("sendgrid", f"echo {fake('SG.', 22)}.{fake('', 43)}", f"{fake('SG.', 22)}.{fake('', 43)}"),
    ("vault-hvs", f"vault kv get -address=https://v {fake('hvs.', 24)}", fake("hvs.", 24)),
    (
        "slack-webhook",
        "curl -d '{}' https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/" + fake("", 24),
        "T0AAAAAAA/B0BBBBBBB/" + fake("", 24),
    ),
    # -- URLs with credentials -------------------------------------------------------------
    ("url-https-credentials", "git clone https://bob:Hunter2-url@example.org/r.git", "Hunter2-url"),
    ("url-postgres", "psql postgres://app:Hunter2-pgurl@db:5432/shop", "Hunter2-pgurl"),
    (
        "url-redis-no-user",
        "redis-cli -u redis://:Hunter2-redisurl@cache:6379/0",
        "Hunter2-redisurl",
    ),
    ("url-mongodb-srv", "mongosh 'mongodb+srv://app:Hunter2-srv@c0.example.net/db'", "Hunter2-srv"),
    ("url-at-in-password", "curl ftp://bob:p@ss-Hunter2@files.example/x", "p@ss-Hunter2"),
    # -- private key blocks ------------------------------------------------------------------
    (
        "private-key-rsa",
        f"-----BEGIN RSA PRIVATE KEY-----{RSA_BODY}-----END RSA PRIVATE KEY-----",
        RSA_BODY,
    ),
    (
        "private-key-openssh-in-command",
        "printf '%s' '-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjEAAAA\\n"
        "-----END OPENSSH PRIVATE KEY-----' > id_ed25519",
        "\\nb3BlbnNzaC1rZXktdjEAAAA\\n",
    ),
    (
        "private-key-pgp-block",
        "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF0x\n-----END PGP PRIVATE KEY BLOCK-----",
        "\nlQOYBF0x\n",
    ),
    (
        "private-key-unterminated",
        "cat > k.pem <<EOF\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB3\nmore lines",
        "\nMHcCAQEEIB3\nmore lines",
    ),
]

BENIGN = [
    "ls -p",
    "git log -p",
    "git log -p --stat src/",
    "sort -k 2 names.txt",
    "sort -u names.txt",
    "grep password README.md",
    'grep -rn "token" src/',
    "mkdir -p src/app",
    "ssh -p 2222 host uptime",
    "mysql -P 3306 -e 'select 1'",
    "docker run -p 8080:80 -u 1000:1000 nginx",
    "docker login --password-stdin -u bob registry.example.com",
    "./configure --passwordless-flag",
    "tool --token-file /run/secrets/token",
    "git push -u origin main",
    "curl https://example.org/search?q=tokens&page=2",
    "git clone https://github.com/owner/repo.git",
    "git clone https://bob@bitbucket.org/team/repo.git",
    "curl https://auth.example.com:8443/health",
    "echo my-secret-garden is a book",
    "cat secret-santa.txt",
    "PWD=/tmp make",
    "git config credential.helper store",
    "aws configure set region eu-west-1",
    "max_tokens=512 python generate.py",
    "AUTH_TYPE=basic ./serve",
    "pip install scikit-learn pypi-simple",
    "python -m tokenize x.py",
    "git show 3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",
    "openssl genrsa -out server.key 2048",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAV2gAwIBAgIU\n-----END CERTIFICATE-----",
    "ssh-keygen -t ed25519 -f id_ed25519",
    "git commit -m 'fix token refresh'",
    "npm_config_cache=/tmp/npm npm ci",
    "author=bob make release",
    "kubectl set image deploy/app app=registry.example/app:1.2",
    "curl -H 'Content-Type: application/json' -d '{\"name\": \"bob\"}' https://x",
    "echo bearer tokens expire",
    "find . -name '*.py' -newer setup.cfg",
    "set -euo pipefail",
    'grep -rn "password=" src/ | head',
    "grep -rn 'token:' src/",
    "git diff HEAD~1 -- src/auth/token.py",
    'python -c "import secrets; print(secrets.token_hex(16))"',
    "kubectl get secret db -o jsonpath='{.data.password}'",
    "cargo test --features auth",
    "echo $GITHUB_TOKEN",
    'gh pr create --title "Fix auth token refresh" --body "Refresh before expiry"',
]


def _event(arguments: dict[str, Any], name: str = "run_command") -> ToolResult:
    call = ToolCall(name, arguments)
    decision = Decision("allow", "allowed by policy", "setting")
    decided = ToolDecided(call, decision, True, "policy", "allowed by policy", call.arguments)
    return ToolResult(call, {"success": True}, 0.001, decided)


def _logged(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _absent(secret: str, raw: str) -> bool:
    """`secret` appears nowhere in the file's text, as written or JSON-escaped."""
    return secret not in raw and json.dumps(secret)[1:-1] not in raw


def test_the_corpus_has_at_least_30_distinct_forms() -> None:
    ids = [case[0] for case in REDACTION_CORPUS]
    assert len(ids) == len(set(ids)) >= 30
    for case_id, text, secret in REDACTION_CORPUS:
        assert text.count(secret) == 1, case_id


@pytest.mark.parametrize(
    ("text", "secret"), [c[1:] for c in REDACTION_CORPUS], ids=[c[0] for c in REDACTION_CORPUS]
)
def test_each_form_is_redacted_and_the_rest_kept(text: str, secret: str, tmp_path: Path) -> None:
    expected = text.replace(secret, REDACTED)
    assert redact(text) == expected
    assert redact(expected) == expected  # a second pass changes nothing

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, "s1")
    assert log.record(_event({"command": text}))
    raw = path.read_text()
    assert _absent(secret, raw)
    (record,) = _logged(path)
    assert record["arguments"] == {"command": expected}  # the command name and flags stay


def test_secrets_in_every_argument_and_in_errors_are_redacted(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, "s1")
    event = _event(
        {
            "path": "https://bob:Hunter2-path@example.org/file.txt",
            "query": "Authorization: Bearer Hunter2-query",
            "cwd": f"/tmp/{GITHUB}",
            "headers": {"Cookie": "sid=Hunter2-nested", "Accept": "text/html"},
            "options": ["--password", "Hunter2-list", f"--key={NPM}"],
        },
        name="search_files",
    )
    failed = ToolResult(
        event.call,
        {"success": False, "error": f"login failed for {PYPI}"},
        0.001,
        event.decision,
    )
    log.record(failed)
    raw = path.read_text()
    for secret in ("Hunter2", GITHUB, NPM, PYPI):
        assert secret not in raw
    (record,) = _logged(path)
    assert record["arguments"]["path"] == f"https://bob:{REDACTED}@example.org/file.txt"
    assert record["arguments"]["headers"] == {"Cookie": REDACTED, "Accept": "text/html"}
    assert record["error"] == f"login failed for {REDACTED}"


def test_arguments_named_like_secrets_keep_no_value() -> None:
    summary = summarise_arguments(
        {"db_password": "x", "AWS_SECRET_ACCESS_KEY": 1, "apiKey": "y", "set-cookie": "z"}
    )
    assert set(summary.values()) == {REDACTED}
    assert summarise_arguments({"max_tokens": 100, "token_file": "t.txt"}) == {
        "max_tokens": 100,
        "token_file": "t.txt",
    }


@pytest.mark.parametrize("text", BENIGN)
def test_ordinary_text_passes_unchanged(text: str) -> None:
    assert redact(text) == text


# Pieces that make a backtracking pattern rescan the rest of the string from each place they
# occur. The redactor before this one took 37 s on 20,000 characters of "a." and grew with
# the square of the length: on these runs such a pattern runs past pytest's timeout.
HOSTILE_PIECES = [
    "a",
    "a=",
    "a:b@",
    "x=api_key=",
    "password=",
    "password",
    "--password ",
    "-a ",
    "-p ",
    "--a=",
    "mysql ",
    "mysql -p",
    "docker login ",
    "curl -u a:",
    "sqlplus a/",
    "vault login -a ",
    "set ",
    "config --a ",
    "login a ",
    "x://",
    "https://a:",
    "eyJ-",
    "eyJaaaaaaaa.",
    "sk-",
    "ghp_",
    "pypi-",
    "AKIA",
    "bearer ",
    "Cookie: ",
    "Authorization: Bearer ",
    "-----BEGIN PRIVATE KEY-----",
    "-----END ",
    "<password>",
    "<a>",
    "---",
    "a_",
    "a.",
    "a-",
    "/a",
    '"',
    "'",
    "\\",
    "\\n",
    " ",
    "\t",
    "=",
    ":",
    "%",
    ",",
    "@",
    "$(",
    ";",
    "\n",
]


@pytest.mark.parametrize("piece", HOSTILE_PIECES)
def test_a_long_run_of_a_hostile_piece_is_redacted(piece: str) -> None:
    """No timing is asserted: finishing at all is the check."""
    hostile = (piece * (2**18 // len(piece) + 1))[: 2**18]
    redacted = redact(hostile)
    assert redact(redacted) == redacted


def test_a_megabyte_of_hostile_text_is_redacted() -> None:
    run = 1_000_000 // len(HOSTILE_PIECES)
    hostile = "".join((piece * (run // len(piece) + 1))[:run] for piece in HOSTILE_PIECES)
    assert len(hostile) >= 990_000
    redacted = redact(hostile)
    assert REDACTED in redacted and redact(redacted) == redacted


# -- the four forms, through a real `agent run` ---------------------------------------

ATTACK = [
    ("docker login -u bob -p Hunter2-docker registry.example.com", "Hunter2-docker"),
    (f"aws configure set aws_secret_access_key {AWS_SECRET}", AWS_SECRET),
    (
        "curl -H 'Cookie: session=Hunter2-cookie' https://shop.example/cart",
        "session=Hunter2-cookie",
    ),
    (f"echo {NPM} > .npm-token", NPM),
    (f"echo {PYPI} > .pypi-token", PYPI),
]


def test_attack_audit_redaction_gaps(run_cli: RunCli, ollama: FakeOllama, workspace: Path) -> None:
    """A model asks to run commands carrying each form; `agent run` refuses them (commands
    are off by default) and records them, and the log keeps the command but not the secret."""
    calls = [tool_call("run_command", {"command": text}) for text, _ in ATTACK]
    ollama.enqueue(reply(tool_calls=calls), reply("Done."))
    r = run_cli("run", "set up the registries")
    assert r.code == 0, r.stderr
    path = default_path(os.environ)
    raw = path.read_text()
    leaked = [secret for _, secret in ATTACK if not _absent(secret, raw)]
    assert leaked == []
    commands = [record["arguments"]["command"] for record in _logged(path)]
    assert commands == [text.replace(secret, REDACTED) for text, secret in ATTACK]
