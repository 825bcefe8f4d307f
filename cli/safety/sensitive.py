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

How an entry matches a path, and the three classes built from these lists for one user:
cli/safety/path_classes.py. The dot-entries that count as configuration: cli/safety/dot_entries.py.
"""

from __future__ import annotations

import functools
import re

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


__all__ = [
    "EXECUTION_SURFACES",
    "SECRETS",
    "SECRET_WORDS",
    "VCS_DIRS",
    "names_secret",
]
