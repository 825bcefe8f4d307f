"""What is sensitive, in one place: the lists every part reads — the policy (file tools,
listing, search), the command sandbox's mounts and the audit redactor.

Three classes of path (security notes: "one list per class, used everywhere"; each gap
between two copies of a list was an escape):

secrets            never read, searched, written or shown to a command; a listing may show
                   their names. Credentials and keys.
execution surfaces files and dirs whose content makes code run later (git's control files,
                   shell start-up files, dirs on $PATH, systemd units, autostart entries,
                   CI configs, hooks, editor tasks, package-manager configs): every write
                   needs a person — never `--yes`, an earlier "always" or `tools: allow` —
                   and commands see them read-only.
agent config       every path this agent would load a config from, existing or not: the
                   same as an execution surface (a model that writes it rewrites its policy).

Each entry is a glob. One that starts with `/` or `~/` is anchored (that path and all
below it); any other matches the trailing components of a path anywhere (`.aws/credentials`
is `…/.aws/credentials` wherever it lies), and everything below a match. `*` and `?` stay
within one component, `**` spans any number, `[…]` is a class. Matching ignores case and
Unicode normalisation (macOS's and Windows' file systems do, and so may a Linux casefold
dir or FUSE mount: `~/.SSH/ID_RSA` is `~/.ssh/id_rsa` there, and the NFD spelling of a name
its NFC one), on every disk: a secret spelled otherwise on an exact disk is kept out too.
Users add entries in YAML (`policy.secrets`, `policy.execution_surfaces`); the defaults
below cannot be switched off from there.

Pure: no I/O here but the $PATH entries the caller passes in and the home dir's spelling on
disk (cli/fs/folding.py).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cli.fs.folding import fold, nfc, on_disk
from cli.fs.globs import glob_regex, has_wildcards

# Words that name a secret: in file names (`credentials`, `password`) and, for the audit
# redactor, in flag and key names (`--password X`, `api_key=X`).
SECRET_WORDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "api_key",
    "apikey",
    "api-key",
    "access_key",
    "private_key",
    "auth",
)

# Short forms that name a secret as a key or flag (`DB_PASS=`, `MYSQL_PWD=`, `--creds`) but
# are too short to look for in file names (`compass`, `pwd.py`): so not in SECRET_WORDS.
_KEY_ABBREVIATIONS = ("pass", "pwd", "pw", "creds")
_NOT_ALNUM = re.compile(r"[\W_]")
_WORDS = frozenset(_NOT_ALNUM.sub("", w).lower() for w in SECRET_WORDS + _KEY_ABBREVIATIONS)
_SUFFIX_WORDS = tuple(w for w in _WORDS if len(w) >= 5)  # also at a word's end: PGPASSWORD
# A name whose last word is one of these is about a secret, not the secret itself:
# `--password-file PATH`, `TOKEN_URL=…`, `--auth-type basic`, `credential.helper store`.
_ABOUT_A_SECRET = frozenset(
    {
        *("file", "files", "path", "dir", "fd", "stdin", "env", "prompt", "cmd", "command"),
        *("type", "method", "mode", "format", "provider", "scope", "scopes", "policy"),
        *("url", "uri", "endpoint", "host", "port", "name", "user", "username"),
        *("length", "len", "min", "max", "count", "limit", "expiry", "ttl", "timeout"),
        *("enabled", "disabled", "required", "helper", "store", "jar"),
    }
)
_COUNTING = frozenset({"no", "max", "min", "num"})  # --no-password, max_tokens=100
_NOT_SECRETS = frozenset({"pwd", "oldpwd"})  # the shell's working directories
_NAME_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


@functools.lru_cache(maxsize=4096)
def names_secret(name: str) -> bool:
    """True if `name` (a key, flag, variable or argument name) names a secret: `--password`,
    `api_key`, `AWS_SECRET_ACCESS_KEY`, `_authToken`, `PGPASSWORD`, `DB_PASS`; not
    `--password-file`, `--passwordless`, `author` or `max_tokens`."""
    if len(name) > 256:
        return True  # no one names a setting like that: keep its value out
    parts = [p.lower() for p in _NAME_PART.findall(name)]
    if not parts or parts[-1] in _ABOUT_A_SECRET or parts[0] in _COUNTING:
        return False
    joined = "".join(parts)
    if joined in _NOT_SECRETS:
        return False
    for i in range(len(parts)):
        word = ""
        for part in parts[i : i + 3]:  # api+key, secret+access+key: words split in the name
            word += part
            if word in _WORDS or (word.endswith("s") and word[:-1] in _WORDS):
                return True
            if word.endswith(_SUFFIX_WORDS):
                return True
    return False


# -- secrets -----------------------------------------------------------------------------------

SECRETS = (
    # Keys and credential stores in the home directory.
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.kube",
    "~/.docker/config.json",
    "~/.password-store",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.config/hub",
    "~/.config/glab-cli",
    "~/.config/rclone",
    "~/.config/op",
    "~/.config/doctl",
    "~/.config/hcloud",
    "~/.config/sops",
    "~/.config/configstore",
    "~/.config/netlify",
    "~/.config/stripe",
    "~/.local/share/keyrings",
    "~/.oci",
    "~/.s3cfg",
    "~/.boto",
    "~/.m2/settings.xml",
    "~/.m2/settings-security.xml",
    "~/.gradle/gradle.properties",
    "~/.gem/credentials",
    "~/.composer/auth.json",
    "~/.config/composer/auth.json",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.terraformrc",
    "~/.databrickscfg",
    "~/.kaggle",
    "~/.huggingface/token",
    "~/.cache/huggingface/token",
    "~/.ollama/id_ed25519",  # signs requests to ollama.com
    "~/.mozilla",  # browser profiles: cookies and saved passwords
    "~/.config/google-chrome",
    "~/.config/chromium",
    "~/.config/BraveSoftware",
    "~/.thunderbird",
    "~/.authinfo",
    "~/.authinfo.gpg",
    "~/.local/share/uv/credentials",  # uv's logins
    ".config/git/credentials",  # git credential-store's second file ($XDG_CONFIG_HOME/git)
    # Credential files wherever they lie (another user's home, a project, a mounted disk).
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".npmrc",
    ".yarnrc.yml",  # npmAuthToken
    ".pypirc",
    ".pgpass",
    ".my.cnf",
    ".vault-token",
    ".htpasswd",
    ".aws/credentials",
    ".aws/config",
    ".docker/config.json",
    ".kube/config",
    ".config/gh/hosts.yml",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gnupg",
    ".ssh",
    # Environment files: .env, .env.local, prod.env, .envrc (direnv).
    ".env*",
    "*.env",
    # Keys and certificates with their private part.
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",  # KeePass
    "*.tfstate",  # Terraform state holds every secret it created
    "*.tfstate.backup",
    "*credentials*",
    "*password*",
    "*secret*.json",
    "*secret*.yml",
    "*secret*.yaml",
    "*secret*.toml",
    "*secrets*",
    "token.json",
    "*token*.json",
    "auth.json",
    "auth.toml",
    ".streamlit/secrets.toml",
    ".config/containers/auth.json",
    ".config/github-copilot",
    ".config/pypoetry/auth.toml",
    ".config/helm/repositories.yaml",
    ".config/ngrok",
    ".fly",
    ".subversion/auth",
    "~/.circleci/cli.yml",
    # macOS. Relative, so that another user's home (/Users/x/Library/…), the system's
    # /Library/Keychains and a backup of a home match too. The keychains hold every saved
    # password; cookies and HTTP storages log in as the user; the browsers' profiles hold
    # cookies, saved passwords and tokens; then the password managers' own data.
    "Library/Keychains",
    "Library/Cookies",
    "Library/HTTPStorages",
    "Library/Safari",
    "Library/Containers/com.apple.Safari",
    "Library/Application Support/Google/Chrome",
    "Library/Application Support/Google/Chrome Beta",
    "Library/Application Support/Google/Chrome Canary",
    "Library/Application Support/Chromium",
    "Library/Application Support/BraveSoftware",
    "Library/Application Support/Microsoft Edge",
    "Library/Application Support/Arc",
    "Library/Application Support/Vivaldi",
    "Library/Application Support/com.operasoftware.Opera",
    "Library/Application Support/Firefox",
    "Library/Thunderbird",
    "Library/Application Support/1Password",
    "Library/Group Containers/2BUA8C4S2C.com.1password",
    "Library/Containers/com.1password.1password",
    "Library/Application Support/Bitwarden",
    "Library/Containers/com.bitwarden.desktop",
    "Library/Application Support/pypoetry/auth.toml",
)

# -- execution surfaces -------------------------------------------------------------------------

# Version-control metadata dirs, each protected as `.git` is: Mercurial runs [hooks] and
# aliases from .hg/hgrc, jj runs its config's aliases and fix tools, Subversion and Bazaar
# keep hooks and config, darcs its prefs (`_darcs/prefs/defaults` sets commands' options),
# Pijul and Sapling theirs.
VCS_DIRS = (".git", ".hg", ".jj", ".svn", ".bzr", "_darcs", ".pijul", ".sl")


# Dotfiles match anywhere, not only in the home dir: a dotfiles repo (~/dotfiles/.bashrc,
# linked or stowed into the home) is the same code. Only names too common to match
# anywhere (~/bin) stay anchored.
EXECUTION_SURFACES = (
    # git: every control file can run code (core.fsmonitor, core.pager, core.sshCommand,
    # hooks, filters, commondir/gitdir redirections, config.worktree); `.git` as a file is
    # a gitdir pointer. Nothing under .git is written without a person. The other version
    # control systems' metadata dirs run code the same way (VCS_DIRS).
    *VCS_DIRS,
    # A bare repository is found by its HEAD (with objects/ and refs/): a model that writes
    # src/HEAD and src/config makes `git status` in src/ run that config.
    "HEAD",
    "packed-refs",
    "commondir",
    ".config/metona-agent",  # this agent's config in any home (the loaded one is exact)
    ".gitmodules",  # submodule.*.update = !command
    ".gitattributes",  # selects filter and diff drivers
    ".gitconfig*",  # .gitconfig and what it includes (.gitconfig.local)
    ".config/git",
    ".gitattributes",
    # Shells: start-up, alias and environment files.
    ".bashrc",
    ".bashrc.d",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".bash_aliases",
    ".bash_completion",
    ".bash_completion.d",
    ".profile",
    ".profile.d",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".zsh",
    ".oh-my-zsh",
    ".kshrc",
    ".mkshrc",
    ".cshrc",
    ".tcshrc",
    ".login",
    ".logout",
    ".inputrc",
    ".config/fish",
    ".config/nushell",
    ".config/starship.toml",
    ".config/environment.d",
    ".pam_environment",
    ".xprofile",
    ".xinitrc",
    ".xsession",
    ".xsessionrc",
    ".direnvrc",
    ".config/direnv",
    ".envrc",
    ".tmux.conf",
    ".config/powershell",
    ".config/alacritty",
    ".config/kitty",
    ".config/wezterm",
    ".wezterm.lua",
    ".config/ghostty",
    ".Rprofile",
    ".psqlrc",
    ".sqliterc",
    ".ghci",
    ".julia/config",
    ".mailcap",
    ".docker/cli-plugins",
    ".config/tmux",
    ".screenrc",
    # Programs found on $PATH (the dirs of the agent's own $PATH are added at start).
    ".local/bin",
    "~/bin",
    ".cargo/bin",
    "~/go/bin",
    ".npm-global",
    ".volta",
    ".deno/bin",
    ".bun/bin",
    ".pyenv",
    ".nvm",
    ".rbenv",
    ".asdf",
    ".local/share/mise",
    # Environments and dependencies: what their bin/ holds runs by name once activated,
    # Python runs .pth files, *customize modules and cached bytecode, npm runs .bin.
    ".venv",
    "venv",
    ".tox",
    ".nox",
    "node_modules",
    "__pycache__",
    "*.pyc",
    # Python runs .pth files and *customize modules from site-packages at every start.
    "~/.local/lib",
    "*.pth",
    "sitecustomize.py",
    "usercustomize.py",
    ".pythonrc",
    ".pythonrc.py",
    ".ipython",
    ".config/ipython",
    # Services, timers, autostart, desktop entries, D-Bus activation.
    ".config/systemd",
    ".local/share/systemd",
    ".config/autostart",
    ".config/autostart-scripts",
    ".config/plasma-workspace",
    ".config/upstart",
    ".config/openbox",
    ".config/i3",
    ".config/sway",
    ".config/hypr",
    ".config/lxsession",
    ".kde/Autostart",
    ".local/share/applications",
    ".local/share/dbus-1",
    ".config/cron",
    # Editors and debuggers that run what their config says.
    ".vimrc",
    ".vim",
    ".config/nvim",
    ".local/share/nvim",
    ".vscode/extensions",
    ".cursor/extensions",
    "*.code-workspace",
    ".zed/tasks.json",
    ".zed/settings.json",
    ".emacs",
    ".emacs.d",
    ".config/emacs",
    ".gdbinit",
    ".config/gdb",
    ".lldbinit",
    ".irbrc",
    ".pryrc",
    ".config/Code/User",
    ".config/Cursor/User",
    ".vscode/settings.json",
    ".vscode/tasks.json",
    ".vscode/launch.json",
    ".vscode/mcp.json",
    ".idea/workspace.xml",
    ".idea/runConfigurations",
    ".cursor/mcp.json",
    ".cursor/rules",
    ".mcp.json",
    ".claude",
    ".gemini",
    ".codex",
    ".devcontainer",
    ".devcontainer.json",
    ".exrc",
    ".nvimrc",
    ".nvim.lua",
    ".lvimrc",
    ".dir-locals.el",
    # Package managers: index URLs, build wrappers, hooks.
    ".config/pip",
    ".pip",
    "pip.conf",
    ".pydistutils.cfg",
    ".condarc",
    ".cargo/config",
    ".cargo/config.toml",
    ".yarnrc",
    ".pnpmfile.cjs",
    ".config/yarn",
    ".bunfig.toml",
    ".gemrc",
    ".bundle/config",
    ".mvn",
    ".gradle/init.d",
    ".gradle/init.gradle",
    "gradle/wrapper",
    "mise.toml",
    ".mise.toml",
    ".config/mise",
    # CI systems and commit hooks.
    ".github/workflows",
    ".github/actions",
    ".gitlab-ci.yml",
    ".gitlab",
    ".circleci",
    ".travis.yml",
    "azure-pipelines.yml",
    ".azure-pipelines",
    "bitbucket-pipelines.yml",
    "Jenkinsfile",
    ".drone.yml",
    ".woodpecker.yml",
    ".woodpecker",
    ".buildkite",
    "appveyor.yml",
    ".appveyor.yml",
    ".cirrus.yml",
    ".semaphore",
    "cloudbuild.yaml",
    "codemagic.yaml",
    ".gitea/workflows",
    ".forgejo/workflows",
    ".husky",
    ".pre-commit-config.yaml",
    ".pre-commit-hooks.yaml",
    "lefthook.yml",
    ".lefthook.yml",
    "lefthook-local.yml",
    ".lintstagedrc*",
    ".simple-git-hooks*",
    ".overcommit.yml",
    # macOS. launchd jobs and login items start programs at login or boot (~/Library and
    # /Library alike: the entries are relative); Terminal's session restore sources
    # ~/.zsh_sessions and ~/.bash_sessions, and a Terminal or iTerm2 profile runs its
    # command; the user's site-packages run .pth files; plugins load into the system's
    # services (Quick Look, Spotlight, input methods); folder actions and services run
    # scripts; and editors, terminals and tools keep under ~/Library/Application Support
    # what they keep under ~/.config on Linux. (~/.zshenv, ~/.zprofile, ~/.zlogin are above.)
    "Library/LaunchAgents",
    "Library/LaunchDaemons",
    "Library/StartupItems",
    "Library/Application Support/com.apple.backgroundtaskmanagementagent",
    "Library/Preferences/com.apple.loginwindow.plist",
    "Library/Preferences/com.apple.Terminal.plist",
    "Library/Preferences/com.googlecode.iterm2.plist",
    "Library/Application Support/iTerm2",
    "Library/Application Support/com.mitchellh.ghostty",
    ".zsh_sessions",
    ".bash_sessions",
    "~/Library/Python",
    "Library/Scripts",
    "Library/Workflows",
    "Library/Services",
    "Library/PreferencePanes",
    "Library/QuickLook",
    "Library/Spotlight",
    "Library/Input Methods",
    "Library/Internet Plug-Ins",
    "Library/Application Support/Code/User",
    "Library/Application Support/Code - Insiders/User",
    "Library/Application Support/VSCodium/User",
    "Library/Application Support/Cursor/User",
    "Library/Application Support/Claude/claude_desktop_config.json",
    "Library/Application Support/pip",
    "Library/Application Support/pypoetry",
    "Library/Application Support/nushell",
    ".hammerspoon",
    ".config/karabiner",
)


# -- dot-entries ----------------------------------------------------------------------------------

# A name starting with a dot configures a program far more often than not, and the programs
# are countless (`.pdbrc` runs Python in pdb, `~/.lesskey` sets LESSOPEN=|cmd for less, which
# is git's and man's pager, `.iex.exs`, `.ocamlinit`, `~/.erlang`…): no list of them is ever
# complete. So every dot-entry counts as configuration (docs/safety.md): under a dot-entry
# of the home dir whatever the allowed dirs, and below an allowed dir under unattended
# approval, except these names, each read by its programs as patterns or plain settings only
# (no include of code, no command, no plugin). `policy.plain_dotfiles` adds to them.
PLAIN_DOTFILES = (
    ".gitignore",
    ".gitkeep",
    ".keep",
    ".mailmap",
    ".editorconfig",
    ".nojekyll",
    ".dockerignore",
    ".npmignore",
    ".prettierignore",
    ".eslintignore",
    ".stylelintignore",
    ".gcloudignore",
    ".vercelignore",
    ".helmignore",
    ".hgignore",
    ".ignore",
    ".rgignore",
    ".fdignore",
)


class PlainNames:
    """The plain-data dotfiles: the built-in names and the user's globs, case ignored (on a
    case-insensitive disk `.GITIGNORE` is `.gitignore`)."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self._exact = frozenset(
            n.lower() for n in (*PLAIN_DOTFILES, *extra) if not has_wildcards(n)
        )
        globs = [glob_regex(g) for g in extra if has_wildcards(g)]
        self._globs = re.compile("(?:" + "|".join(globs) + ")$", re.IGNORECASE) if globs else None

    def __call__(self, name: str) -> bool:
        if name.lower() in self._exact:
            return True
        return self._globs is not None and self._globs.match(name) is not None


def home_dot_entry(path: str, homes: Sequence[str]) -> str | None:
    """The dot-entry of a home dir that `path` (absolute) is or lies under (`~/.config` for
    `~/.config/jj/config.toml`), or None."""
    for home in homes:
        prefix = home.rstrip("/") + "/"
        if path.startswith(prefix):
            first = path[len(prefix) :].split("/", 1)[0]
            if nfc(first).startswith("."):
                return prefix + first
    return None


def dot_component(path: str, root: str, plain: Callable[[str], bool]) -> str | None:
    """The first component of `path` below `root` (an allowed dir holding it) that starts
    with a dot, unless it is the last one and `plain` data; None if there is none."""
    if path == root:
        return None
    parts = path[len(root.rstrip("/")) + 1 :].split("/")
    for index, part in enumerate(parts):
        # As the lists see it: HFS+ leaves ZWNJ and friends out, `<ZWNJ>.bashrc` is `.bashrc`.
        name = nfc(part)
        if name.startswith(".") and not (index == len(parts) - 1 and plain(name)):
            return part
    return None


# -- matching -----------------------------------------------------------------------------------


def literal(path: str) -> str:
    """An absolute path as an entry that matches it literally: each glob character in a
    class of its own (`[*]`)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in path)


def anchored(glob: str, home: str) -> str | None:
    """The absolute path an anchored entry names (`~/x` against `home`), else None."""
    if glob.startswith("~/"):
        return os.path.join(home, glob[2:]).rstrip("/") or "/"
    if glob.startswith("/"):
        return glob.rstrip("/") or "/"
    return None


def entry_regex(glob: str, home: str) -> str:
    """The regex an entry matches on absolute paths: the path itself and all below it."""
    root = anchored(glob, home)
    if root is not None:
        return "^" + glob_regex(root) + "(?:/|$)"
    return "(?:^|/)" + glob_regex(glob.strip("/")) + "(?:/|$)"


@dataclass(frozen=True)
class PathClass:
    """One class of path: its entries (globs) and extra regexes, compiled into one matcher."""

    name: str
    globs: tuple[str, ...]
    regexes: tuple[str, ...]
    homes: tuple[str, ...]  # `~/` in an entry: each of these (the home as given, resolved)
    # Three matchers, so that a walk pays per entry, not per character of a deep path:
    # anchored entries are tried once at the start, plain relative ones at component starts,
    # and only regexes and `**` globs search the whole string.
    _anchored: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _relative: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _free: re.Pattern[str] = field(init=False, repr=False, compare=False)
    # For match_entry: relative entries of one component as a test of the last name, and
    # those of several (`.aws/credentials`) tried from the start of the _span-th last one.
    _name: _NameTest = field(init=False, repr=False, compare=False)
    _nested: re.Pattern[str] = field(init=False, repr=False, compare=False)
    # The names a nested glob's next-to-last component can have (lowered; None: it has
    # wildcards, no such test): an entry whose directory has another name matches none.
    _nested_parents: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _free_search: Callable[[str], object] | None = field(init=False, repr=False, compare=False)
    _anchored_roots: frozenset[str] | None = field(init=False, repr=False, compare=False)
    _span: int = field(init=False, repr=False, compare=False)  # most components a nested glob has

    def __getattr__(self, name: str) -> Any:
        """The matchers are compiled when first used, not when the policy is built: a few
        dozen milliseconds of start-up (Python compiles regexes in Python) that a run which
        never looks at a path does not pay."""
        if name.startswith("_") and name in _COMPILED:
            self._compile()
            return object.__getattribute__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _compile(self) -> None:
        # Paths are matched in normal form C (`match` normalises them), so the entries are.
        regexes, homes = [nfc(r) for r in self.regexes], [nfc(h) for h in self.homes]
        # A path is also matched fully case folded (`match`): so is its home then.
        homes = list(dict.fromkeys([*homes, *(fold(h) for h in homes if not h.isascii())]))
        anchored_parts, relative_parts, free_parts = [], [], [f"(?:{r})" for r in regexes]
        single, nested, nested_globs = [], [], []
        span = 1
        globs = [nfc(g) for g in self.globs]
        for glob in globs:
            if anchored(glob, homes[0]) is not None:
                anchored_parts += [entry_regex(glob, h) for h in homes]
            elif "**" in glob:
                free_parts.append(entry_regex(glob, ""))
            else:
                body = glob.strip("/")
                relative_parts.append(glob_regex(body))
                if "/" in body:
                    nested.append(glob_regex(body))
                    nested_globs.append(body)
                    span = max(span, body.count("/") + 1)
                else:
                    single.append(body)

        def compiled(parts: list[str], suffix: str = "") -> re.Pattern[str]:
            alternatives = "|".join(dict.fromkeys(parts))
            return re.compile(f"(?:{alternatives}){suffix}" if parts else "(?!)", re.IGNORECASE)

        object.__setattr__(self, "_anchored", compiled(anchored_parts))  # frozen: set once
        # For match_entry: anchored entries without wildcards as a set of paths (lowered:
        # matching ignores case), when every anchored entry is one; else None.
        roots: set[str] | None = set()
        for glob in globs:
            for home in homes:
                root = anchored(glob, home)
                if root is not None and roots is not None:
                    plain = root.isascii() and not has_wildcards(root) and "\\" not in root
                    roots = roots | {os.path.normpath(root).lower()} if plain else None
        object.__setattr__(self, "_anchored_roots", None if roots is None else frozenset(roots))
        object.__setattr__(self, "_relative", compiled(relative_parts, "(?:/|$)"))
        object.__setattr__(self, "_free", compiled(free_parts))
        # Searching with a pattern that never matches still tries every position: skip it.
        object.__setattr__(
            self, "_free_search", compiled(free_parts).search if free_parts else None
        )
        object.__setattr__(self, "_name", _NameTest(single))
        parents = [glob.split("/")[-2] for glob in nested_globs]
        plain = all(p.isascii() and not has_wildcards(p) and "\\" not in p for p in parents)
        object.__setattr__(
            self, "_nested_parents", frozenset(p.lower() for p in parents) if plain else None
        )
        nested_pattern = compiled(nested, "(?:/|$)").pattern
        object.__setattr__(
            self, "_nested", re.compile(f"(?:[^/]*/)*?{nested_pattern}", re.IGNORECASE)
        )
        object.__setattr__(self, "_span", span)

    def match(self, path: str) -> bool:
        """True if `path` (absolute, or as the model wrote it) is in this class."""
        path = nfc(path)
        if self._match(path):
            return True
        # Full case folding, which a folding disk may use: `\ufb06` is `st`, `\u00df` `ss`
        # (re.IGNORECASE folds one letter to one letter only).
        folded = path if path.isascii() else fold(path)
        return folded != path and self._match(folded)

    def _match(self, path: str) -> bool:
        if self._anchored.match(path) or self._free.search(path):
            return True
        return any(self._relative.match(path, start) for start in _starts(path))

    def match_entry(self, path: str) -> bool:
        """`match` for a walk that has checked every ancestor of `path` already and found it
        not in the class: a match must then end at the last component, so only the last few
        component starts need trying, however deep the path (tests/safety/test_path_classes.py
        compares it with `match`)."""
        path = nfc(path)
        if self._match_entry(path):
            return True
        folded = path if path.isascii() else fold(path)
        return folded != path and self._match_entry(folded)

    def _match_entry(self, path: str) -> bool:
        roots = self._anchored_roots
        if roots is None or not path.isascii():
            if self._anchored.match(path):
                return True
        elif path.lower() in roots:
            return True  # below one, an ancestor would have matched: only the root itself
        if self._free_search and self._free_search(path):
            return True
        last = path.rfind("/") + 1
        if self._name.matches(path, last):
            return True
        if self._span == 1:
            return False
        if last < 2:
            return False  # no directory above the name: a glob of two components or more fails
        start = path.rfind("/", 0, last - 1)
        parents = self._nested_parents
        if parents is not None:
            parent = path[start + 1 : last - 1]
            if parent.isascii() and parent.lower() not in parents:
                return False
        for _ in range(self._span - 2):
            if start < 0:
                break
            start = path.rfind("/", 0, start)
        # From the start of the _span-th last component (or the path's start), where the
        # pattern tries each component start in turn.
        return self._nested.match(path, max(start, -1) + 1) is not None

    def anchored_paths(self) -> list[str]:
        """The concrete paths this class names outside any tree walk: anchored entries, and
        plain relative ones (no wildcards) taken at the home dir. The sandbox masks or locks
        these; entries with wildcards are only found by walking (the writable dirs)."""
        out: list[str] = []
        for glob in self.globs:
            for home in self.homes:
                root = anchored(glob, home)
                if root is None and not has_wildcards(glob):
                    root = os.path.join(home, glob.strip("/"))
                if root is not None and not has_wildcards(root):
                    out.append(os.path.normpath(root))
        return list(dict.fromkeys(out))


_COMPILED = frozenset(
    {"_anchored", "_relative", "_free", "_free_search", "_name", "_nested_parents", "_nested"}
    | {"_span", "_anchored_roots"}
)


class _NameTest:
    """Globs of one component as a test of a path's last name. The usual shapes — `NAME`,
    `PREFIX*`, `*SUFFIX`, `*PART*` of ASCII letters — are set and string tests on the name
    lowered, which for an ASCII name is what re.IGNORECASE does; other globs, and any name
    that is not ASCII, go through the regex."""

    def __init__(self, globs: Sequence[str]) -> None:
        exact, prefixes, suffixes, parts, other = set(), [], [], [], []
        for glob in globs:
            core = glob.strip("*")
            stars = (glob.startswith("*"), glob.endswith("*"))
            if not core or not core.isascii() or any(c in core for c in "*?[]\\"):
                other.append(glob)
            elif stars == (False, False):
                exact.add(core.lower())
            elif stars == (False, True):
                prefixes.append(core.lower())
            elif stars == (True, False):
                suffixes.append(core.lower())
            elif glob == f"*{core}*":
                parts.append(core.lower())
            else:
                other.append(glob)
        self._exact = frozenset(exact)
        self._prefixes, self._suffixes, self._parts = tuple(prefixes), tuple(suffixes), parts
        alternatives = "|".join(dict.fromkeys(glob_regex(g) for g in other)) or "(?!)"
        self._other = re.compile(f"(?:{alternatives})$", re.IGNORECASE)
        self._other_literals = _literals(other) if other else ()
        everything = "|".join(dict.fromkeys(glob_regex(g) for g in globs)) or "(?!)"
        self._all = re.compile(f"(?:{everything})$", re.IGNORECASE)

    def matches(self, path: str, start: int) -> bool:
        """Does the name at path[start:] (no slash in it) match one of the globs?"""
        name = path[start:]
        if not name.isascii():
            return self._all.match(path, start) is not None
        low = name.lower()
        if low in self._exact or low.startswith(self._prefixes) or low.endswith(self._suffixes):
            return True
        for part in self._parts:
            if part in low:
                return True
        literals = self._other_literals
        if literals is not None:
            for literal in literals:
                if literal in low:
                    break
            else:
                return False
        return self._other.match(path, start) is not None


def _literals(globs: Sequence[str]) -> tuple[str, ...] | None:
    """For each glob the longest run of plain ASCII characters (lowered) that every path it
    matches holds; None if some glob has none (then there is no such shortcut)."""
    out = []
    for glob in globs:
        runs = re.split(r"\[[^\]]*\]|[*?\[\]\\]", glob)
        best = max(runs, key=len)
        if not best or not best.isascii():
            return None
        out.append(best.lower())
    return tuple(dict.fromkeys(out))


def _starts(path: str) -> list[int]:
    """Where each component of `path` begins."""
    starts = [] if path.startswith("/") else [0]
    position = path.find("/")
    while position >= 0:
        starts.append(position + 1)
        position = path.find("/", position + 1)
    return starts


def path_dirs(path_var: str) -> list[str]:
    """The absolute dirs of a $PATH value, as written and with symlinks resolved: programs
    there run by name, so they are execution surfaces wherever they are — under the home,
    or in a project whose venv is active (`proj/.venv/bin`), where a command that planted a
    link there would otherwise choose what the sandbox shows. System dirs (/usr/bin …) are
    outside every allowed dir a sane policy has, and read-only to commands anyway."""
    dirs = []
    for part in path_var.split(os.pathsep):
        if os.path.isabs(part):
            dirs += [os.path.normpath(part), os.path.realpath(part)]  # ~/tl/bin -> tools/bin
    return list(dict.fromkeys(dirs))


# Where the XDG base-directory variables move what the lists name under ~/.config,
# ~/.local/share and ~/.local/state: git, systemd, autostart, fish, gh… follow them.
XDG_DIRS = (
    ("XDG_CONFIG_HOME", ".config/"),
    ("XDG_DATA_HOME", ".local/share/"),
    ("XDG_STATE_HOME", ".local/state/"),
)


def xdg_entries(globs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The entries under ~/.config (…) again under $XDG_CONFIG_HOME (…) when it is set."""
    out = []
    for var, prefix in XDG_DIRS:
        base = env.get(var, "")
        if not base or not os.path.isabs(base):
            continue
        for glob in globs:
            rest = glob[2:] if glob.startswith("~/") else glob
            if rest.startswith(prefix):
                out.append(os.path.join(base, rest[len(prefix) :]))
    return out


@dataclass(frozen=True)
class Classes:
    """The three classes for one user: built once per run from the defaults, the YAML's
    additions, the home dir, $PATH and where the config lives."""

    secrets: PathClass
    surfaces: PathClass
    agent_config: PathClass
    agent_paths: tuple[str, ...] = ()  # what agent_config matches, as concrete paths


def build(
    home: str,
    extra_secrets: Sequence[str] = (),
    extra_surfaces: Sequence[str] = (),
    secret_regexes: Sequence[str] = (),
    surface_regexes: Sequence[str] = (),
    path_var: str = "",
    agent_paths: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    code_dirs: Sequence[str] = (),
) -> Classes:
    """`agent_paths`: the agent's config dirs and file, absolute (matched literally). `env`:
    the XDG variables that move ~/.config and friends. `code_dirs`: where the agent's own
    Python code is imported from (absolute): execution surfaces, as $PATH's dirs are."""
    real_home = os.path.realpath(home)
    homes = tuple(dict.fromkeys((os.path.normpath(home), real_home, on_disk(real_home))))
    dirs = path_dirs(path_var)
    dirs += [f for d in code_dirs for f in (os.path.normpath(d), os.path.realpath(d))]
    surfaces = (*EXECUTION_SURFACES, *dict.fromkeys(dirs), *extra_surfaces)
    secrets = (*SECRETS, *extra_secrets)
    surfaces = (*surfaces, *xdg_entries(surfaces, env or {}))
    secrets = (*secrets, *xdg_entries(secrets, env or {}))
    literal = tuple("^" + re.escape(p.rstrip("/")) + "(?:/|$)" for p in agent_paths)
    return Classes(
        PathClass("secret", secrets, tuple(secret_regexes), homes),
        PathClass("execution surface", surfaces, tuple(surface_regexes), homes),
        PathClass("agent config", (), tuple(dict.fromkeys(literal)), homes),
        tuple(dict.fromkeys(os.path.normpath(p) for p in agent_paths)),
    )


__all__ = [
    "EXECUTION_SURFACES",
    "PLAIN_DOTFILES",
    "SECRETS",
    "SECRET_WORDS",
    "VCS_DIRS",
    "Classes",
    "PathClass",
    "PlainNames",
    "build",
    "dot_component",
    "home_dot_entry",
    "literal",
    "names_secret",
    "path_dirs",
]
