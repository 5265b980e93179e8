"""The config file is validated: unknown sections and keys, and bad values, are refused by their path.

And it is documented: the README's tables and the `gateway.config.settings` docstring name every key the
models accept, with the models' defaults, which are `Settings`' own.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from gateway.config import settings as settings_module
from gateway.config.approvals import ApprovalSettings, PasskeyRequirement, PolicyRule
from gateway.config.console import ConsoleSection, OidcSection
from gateway.config.file import (
    AdapterSection,
    AuditExportSection,
    ConfigFile,
    GatewaySection,
    NotificationsSection,
    OrgSection,
    RegistrySection,
    WebhookSection,
    key_path,
    read_config,
)
from gateway.config.oauth import IssuerSection, OAuthSection
from gateway.config.settings import AdapterSettings, Settings
from gateway.config.upstreams import ToolReview, UpstreamSection
from gateway.errors import ConfigError
from gateway.limits.budgets import Limits
from tests.support.examples import examples

ROOT = Path(__file__).resolve().parents[2]

SECTIONS: dict[str, type[BaseModel]] = {
    "gateway": GatewaySection,
    "adapters.<name>": AdapterSection,
    "orgs.<name>": OrgSection,
    "registry": RegistrySection,
    "limits": Limits,
    "approvals": ApprovalSettings,
    "approvals.policies.<name>": PolicyRule,
    "approvals.require_passkey": PasskeyRequirement,
    "console": ConsoleSection,
    "console.oidc": OidcSection,
    "oauth": OAuthSection,
    "oauth.issuers.<name>": IssuerSection,
    "notifications": NotificationsSection,
    "notifications.webhooks.<name>": WebhookSection,
    "audit_export": AuditExportSection,
    "upstreams.<name>": UpstreamSection,
    "upstreams.<name>.tools.<tool>": ToolReview,
}


_ISSUER = '[oauth]\nresource = "https://gw.example/mcp"\n[oauth.issuers.corp]\nissuer = "https://login.example"\n'
"""An [oauth] section with one issuer, to which a row adds one key."""


def _refusal(tmp_path: Path, text: str) -> str:
    config = tmp_path / "countersign.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as refused:
        Settings.load({}, config)
    message = str(refused.value)
    assert str(config) in message
    return message


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[gateway]\nbogus = 1\n", "gateway.bogus: unknown setting"),
        ('[adapters.rooms]\nurl = "http://r.example"\ntokn_env = "T"\n', "adapters.rooms.tokn_env: unknown setting"),
        ("[nonsense]\n", "nonsense: unknown section"),
        ('[orgs.acme]\nadapters = ["rooms"]\nrole = ["staff"]\n', "orgs.acme.role: unknown setting"),
        ("[registry]\nallowed = []\n", "registry.allowed: unknown setting"),
        ("[limits]\nreadz = { per_minute = 1, burst = 1 }\n", "limits.readz: unknown setting"),
        ("[limits.reads]\nper_minute = 1\nburst = 1\nextra = 2\n", "limits.reads.extra: unknown setting"),
    ],
)
def test_an_unknown_section_or_key_is_refused_by_its_path(tmp_path: Path, text: str, named: str) -> None:
    """The refusal names the file and the whole path of what it does not know."""
    assert named in _refusal(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[gateway]\nport = "8o"\n', "gateway.port: Input should be a valid integer (got '8o')"),
        ("[gateway]\nport = 70000\n", "gateway.port: Input should be less than or equal to 65535"),
        ('[gateway]\nrun_worker = "yes"\n', "gateway.run_worker: Input should be a valid boolean"),
        ("[gateway]\nlease_seconds = -1\n", "gateway.lease_seconds: Input should be greater than 0"),
        ("[gateway]\nreconcile_horizon_seconds = 0\n", "gateway.reconcile_horizon_seconds"),
        ("[gateway]\nlease_seconds = inf\n", "gateway.lease_seconds: Input should be a finite number"),
        ("[gateway]\nallowed_hosts = []\n", "gateway.allowed_hosts: List should have at least 1 item"),
        ('[adapters.rooms]\nurl = "ftp://rooms"\n', "adapters.rooms.url: Value error, must be an http"),
        ('[orgs.acme]\nroles = ["staff", 2]\n', "orgs.acme.roles[1]: Input should be a valid string"),
        ("[limits.reads]\nper_minute = 10\nburst = 0\n", "limits.reads.burst: Input should be greater than"),
        ('[limits]\nsessions_per_key = "many"\n', "limits.sessions_per_key: Input should be a valid integer"),
        ("[limits]\nsession_idle_seconds = inf\n", "limits.session_idle_seconds: Input should be a finite number"),
        ("[limits.proposals]\nper_minute = nan\nburst = 1\n", "limits.proposals.per_minute: Input should be a finite"),
        ("gateway = 3\n", "gateway: Input should be a valid dictionary"),
        (f'{_ISSUER}algorithms = ["HS256"]\n', "oauth.issuers.corp.algorithms: Value error, only asymmetric"),
        (f'{_ISSUER}algorithms = ["RS256", "none"]\n', "oauth.issuers.corp.algorithms: Value error, only asymmetric"),
        ('[oauth.issuers.corp]\nissuer = "https://login.example"\n', "oauth: Value error, issuer corp mints for mcp"),
        (f'{_ISSUER}surfaces = ["admin"]\n', "oauth: Value error, issuer corp mints for admin"),
        ('[oauth]\nresource = "http://gw.example/mcp"\n', "oauth.resource: Value error, must be an https://"),
        (f"{_ISSUER}max_key_age_seconds = inf\n", "oauth.issuers.corp.max_key_age_seconds: Input should be a finite"),
    ],
)
def test_a_bad_value_is_refused_naming_its_key_and_the_file(tmp_path: Path, text: str, named: str) -> None:
    """A wrong type or an out-of-range value names the key's path and what was wrong with it."""
    assert named in _refusal(tmp_path, text)


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    """One line per problem, so an operator fixes the file in one go."""
    message = _refusal(tmp_path, '[gateway]\nbogus = 1\nport = "x"\n\n[adapters.rooms]\ntokn_env = "T"\n')
    assert [line.strip() for line in message.splitlines()[1:]] == [
        "gateway.port: Input should be a valid integer (got 'x')",
        "gateway.bogus: unknown setting",
        "adapters.rooms.tokn_env: unknown setting",
    ]


def test_unreadable_toml_is_a_config_error(tmp_path: Path) -> None:
    assert "cannot read config" in _refusal(tmp_path, "not toml at all [")


_KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(section=st.sampled_from(["gateway", "adapters.rooms", "orgs.acme", "registry", "limits", "limits.reads"]),
       key=_KEYS)  # fmt: skip
def test_any_unknown_key_in_any_section_is_named(tmp_path: Path, section: str, key: str) -> None:
    """Whatever the key (dots, quotes, control characters, any script), the refusal names its exact path."""
    known = {"gateway": GatewaySection, "adapters.rooms": AdapterSection, "orgs.acme": OrgSection,
             "registry": RegistrySection, "limits": Limits}.get(section)  # fmt: skip
    fields = set(known.model_fields) if known is not None else {"per_minute", "burst"}
    if key in fields:
        return
    quoted = '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\U{ord(c):08x}" for c in key) + '"'
    body = "per_minute = 1\nburst = 1\n" if section == "limits.reads" else ""
    message = _refusal(tmp_path, f"[{section}]\n{body}{quoted} = 1\n")
    assert f"{key_path((*section.split('.'), key))}: unknown setting" in message


def test_a_key_path_quotes_what_is_not_a_bare_key() -> None:
    """A dot or a control character inside a key cannot make its path read as another path."""
    assert key_path(("gateway", "a.b")) == 'gateway."a.b"'
    assert key_path(("orgs", "acme", "roles", 1)) == "orgs.acme.roles[1]"
    assert key_path(("gateway", "x\ny")) == 'gateway."x\\u000ay"'


def test_the_models_defaults_are_the_settings_defaults() -> None:
    """A file that says nothing gives the `Settings` a test would build by hand."""
    built = {f.name: f for f in dataclasses.fields(Settings)}
    gateway = GatewaySection()
    for name in GatewaySection.model_fields:
        if name in ("data_dir", "audit_secret_env", "audit_archive_dir", "metrics_token_env"):
            continue  # strings in the file, Paths (or a variable's name) in Settings
        if name.startswith("redis_") and name not in built:
            continue  # a Sentinel or Cluster deployment's parts, folded into Settings.redis_url
        expected = built[name].default
        value = getattr(gateway, name)
        assert (tuple(value) if isinstance(value, list) else value) == expected, name
    assert GatewaySection().data_dir == str(Settings().data_dir)
    assert RegistrySection().allowed_base_urls is None  # unset: decided by the mode (tests/config/test_settings.py)
    adapter, declared = AdapterSection(), AdapterSettings(name="x")
    assert (adapter.timeout_seconds, adapter.health_path) == (declared.timeout_seconds, declared.health_path)
    assert ConfigFile().limits == Settings().limits
    assert ConfigFile().approvals == Settings().approvals
    assert ConfigFile().notifications.resolve({}) == Settings().notifications
    assert ConfigFile().audit_export.resolve({}) is Settings().audit_export is None


def _readme_tables() -> dict[str, dict[str, str]]:
    """Each ``### `[section]` `` table of the README's configuration: key -> default cell."""
    text = (ROOT / "README.md").read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, dict[str, str]] = {}
    for heading, body in re.findall(r"### `\[([^\]]+)\]`\n(.*?)(?=\n### |\Z)", text, flags=re.S):
        rows = re.findall(r"^\| `([a-z_]+)` \| (.+?) \|", body, flags=re.M)
        tables[heading] = dict(rows)
    return tables


def test_the_readme_documents_every_setting_with_its_default() -> None:
    """One table per section, one row per key the model accepts, and a literal default is the model's."""
    tables = _readme_tables()
    assert set(tables) == set(SECTIONS)
    for section, model in SECTIONS.items():
        assert set(tables[section]) == set(model.model_fields), section
        defaults = model.model_construct()  # a required key has no default, and its row says so in words
        for key, cell in tables[section].items():
            literal = re.fullmatch(r"`([^`]+)`", cell.strip())
            if literal is None:
                continue  # "unset: ..." says in words what the default is
            documented = tomllib.loads(f"v = {literal.group(1)}")["v"]
            actual = getattr(defaults, key)
            actual = actual.model_dump() if isinstance(actual, BaseModel) else actual
            assert documented == actual, (section, key)


def _docstring_example() -> str:
    """The annotated file in the `gateway.config.settings` docstring, dedented."""
    doc = settings_module.__doc__ or ""
    block = doc.split("with its default (the README's configuration tables say the same)::\n", 1)[1]
    lines = []
    for line in block.splitlines():
        if line.strip() and not line.startswith("    "):
            break
        lines.append(line[4:])
    return "\n".join(lines)


def test_the_settings_docstring_names_every_setting_and_is_a_valid_file(tmp_path: Path) -> None:
    """The docstring's annotated file holds every key of every section (a sample of `[limits]`), and
    reads without a problem."""
    example = tomllib.loads(_docstring_example())
    assert set(example["gateway"]) == set(GatewaySection.model_fields)
    assert set(example["adapters"]["rooms"]) == set(AdapterSection.model_fields)
    assert set(example["orgs"]["acme"]) == set(OrgSection.model_fields)
    assert set(example["registry"]) == set(RegistrySection.model_fields)
    assert set(example["limits"]) <= set(Limits.model_fields)
    config = tmp_path / "example.toml"
    config.write_text(_docstring_example())
    assert read_config(config).gateway.port == 8765


def test_an_oauth_section_reads_into_the_settings(tmp_path: Path) -> None:
    """Issuers, their claim mapping and the tool scopes arrive in `Settings.oauth` as written."""
    config = tmp_path / "countersign.toml"
    config.write_text(_ISSUER + 'org = "acme"\nscope_roles = { "cards:approve" = ["approver"] }\n'
                      '[oauth.tool_scopes]\n"rooms_*" = ["rooms"]\n')  # fmt: skip
    oauth = Settings.load({}, config).oauth
    assert oauth.resource == "https://gw.example/mcp" and oauth.issuers_for("mcp") == ["https://login.example"]
    assert oauth.issuers["corp"].org == "acme" and oauth.issuers["corp"].scope_roles == {"cards:approve": ["approver"]}
    assert oauth.scopes_for("rooms_book") == {"rooms"} and oauth.scopes_for("orders_cancel") == frozenset()
