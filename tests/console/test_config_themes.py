from speedtui.services.config import Config
from speedtui.ui.themes import load_themes, resolve_theme_name


def test_config_round_trip_keeps_unknown_fields(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"theme": "speed-light", "keys": {"app.traces": "f5"}, "mine": 1}')
    c = Config.load(p)
    assert c.theme == "speed-light" and c.keys == {"app.traces": "f5"}
    c.theme = "speed-high-contrast"
    c.save()
    again = Config.load(p)
    assert again.theme == "speed-high-contrast"
    assert '"mine": 1' in p.read_text()
    assert (p.stat().st_mode & 0o777) == 0o600


def test_bad_config_is_a_warning(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1,2")
    c = Config.load(p)
    assert c.warning and c.theme == "speed-dark"


def test_three_themes():
    t = load_themes()
    assert {"speed-dark", "speed-light", "speed-high-contrast"} <= set(t)
    assert t["speed-light"].dark is False
    assert resolve_theme_name("hc") == "speed-high-contrast"
