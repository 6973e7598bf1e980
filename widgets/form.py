"""Forms generated from the config dataclasses (`workbench.learn.config.describe`) and from an env's
PARAMS: one widget per field, its type from the field's annotation, its tooltip and the grey text
beside it from the field's doc. Nothing here lists a field by hand, so a field added to a config
class appears in the panel by itself."""
from __future__ import annotations

import html
import typing

import ipywidgets as widgets
import numpy as np
import traitlets
import yaml

from workbench.learn import config as cfg
from workbench.learn.config import ConfigError

LABEL_WIDTH = "200px"
# fields that only act on a GPU target: hidden while the panel's target is the CPU
GPU_ONLY = ("cuda_graph",)
# the fields of a population (RunConfig.seeds, sweep, rank_by): the panel shows them on rows of their own
POPULATION = ("seeds", "sweep", "rank_by")
SWEEP_EXAMPLE = "lr=1e-3,3e-4; ent_coef=0,0.01"


def _base(kind):
    return typing.get_origin(kind) or kind


# what a list-of-names field looks like in the form (the dict fields' examples: the config's own)
NAME_LIST_EXAMPLES = {"frozen": "runners", "centralised_critic": "runners"}


def _text(value, name: str = "") -> str:
    if value is None:
        return ""
    if name == "sweep" and isinstance(value, dict):
        return sweep_text(value)
    if isinstance(value, (tuple, list)):  # (a list given from Python, e.g. set(frozen=["runners"]))
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return yaml.safe_dump(value, default_flow_style=True).strip()
    return str(value)


def field_widget(name: str, kind, default, value, doc: str) -> widgets.Widget:
    """The widget of one field: Checkbox (bool), IntText (int), FloatText (float), else Text (str,
    tuples as "64, 64", dicts as YAML, and any field whose default is None: empty means None)."""
    base = _base(kind)
    common = dict(description=name, tooltip=doc, style={"description_width": LABEL_WIDTH},
                  layout=widgets.Layout(width="360px"))
    if base is bool:
        # the box first, then the whole name: a checkbox's label never truncates
        widget = widgets.Checkbox(value=bool(value), indent=False, description=name, tooltip=doc,
                                  layout=widgets.Layout(width="360px"))
    elif base is int and default is not None and value is not None:
        widget = widgets.IntText(value=int(value), **common)
    elif base is float and default is not None and value is not None:
        widget = widgets.FloatText(value=float(value), **common)
    elif name == "rank_by":  # the statistics a run reports are offered once the env is known (RunForm)
        widget = widgets.Combobox(value=_text(value), ensure_option=False, placeholder="mean_return", **common)
    elif name == "sweep":  # a grid written as "lr=1e-3,3e-4; ent_coef=0,0.01" (parse_sweep)
        widget = widgets.Text(value=_text(value, name), placeholder=f"none; e.g. {SWEEP_EXAMPLE}", **common)
    else:
        widget = widgets.Text(value=_text(value), placeholder="None" if default is None else "", **common)
    widget.add_class(f"wb-field-{name}")
    widget.add_class("wb-field")
    return widget


def parse_field(owner: str, name: str, kind, default, widget):
    """The value of `widget` as the field's type; ConfigError naming the field otherwise."""
    base = _base(kind)
    if isinstance(widget, widgets.Checkbox) and base is int:  # an env's 0/1 flag shown as a checkbox
        return int(widget.value)
    if isinstance(widget, widgets.Checkbox) and default is None and not widget.value:
        return None  # unticked: the field's "not set" (progress: whatever the entry point does)
    if not isinstance(widget, widgets.Text):
        return widget.value
    if name == "sweep":
        return parse_sweep(widget.value, owner)
    text = widget.value.strip()
    if text in ("", "None", "none", "null"):
        if name == "rank_by":  # (the box's placeholder: the default)
            return default
        if default == ():  # an empty list, e.g. no centralised critics
            return ()
        if default is None or base is str:
            return None if default is None else ""
        raise ConfigError(f"{owner}.{name} needs a value (it has no 'None'): e.g. {_text(default)!r}")
    try:
        if base is tuple:
            parts = [p.strip().strip("'\"") for p in text.strip("()[] ").split(",") if p.strip().strip("'\"")]
            if default == ():  # a list of names (centralised_critic)
                return tuple(parts)
            return tuple(int(p) for p in parts)
        if base is dict:
            value = yaml.safe_load(text)
            if not isinstance(value, dict):
                raise ValueError("not a mapping")
            return value
        if base is float:
            return float(text)
        if base is int:
            return int(text)
        if base is bool:
            return {"true": True, "false": False}[text.lower()]
        return text
    except (ValueError, KeyError, yaml.YAMLError):
        example = (NAME_LIST_EXAMPLES.get(name) or cfg.DICT_EXAMPLES.get(name)
                   or {tuple: "64, 64", dict: "{max_steps: 200}", float: "0.5", int: "8", bool: "true"}.get(base, ""))
        raise ConfigError(f"{owner}.{name}: cannot read {text!r} as {getattr(base, '__name__', base)}"
                          + (f" (e.g. {example})" if example else "")) from None


def sweep_text(sweep: dict | None) -> str:
    """A sweep as the panel's field writes it: {"lr": [0.001, 0.0003], "ent_coef": [0, 0.01]} ->
    "lr=0.001,0.0003; ent_coef=0,0.01" ("" for none)."""
    return "; ".join(f"{name}={','.join(str(v) for v in values)}" for name, values in (sweep or {}).items())


def parse_sweep(text: str, owner: str = "RunConfig") -> dict | None:
    """The sweep field's text as config.sweep: "lr=1e-3,3e-4; ent_coef=0,0.01" -> {"lr": [0.001,
    0.0003], "ent_coef": [0.0, 0.01]} (settings apart by ";" or a new line, values by "," or spaces;
    the YAML mapping "{lr: [1e-3, 3e-4]}" is read too); None for "" or "None". ConfigError naming
    `owner`.sweep and the part it cannot read otherwise. Which names may be swept is the config's
    check (config.SWEEPABLE), made when the panel reads its fields."""
    text = (text or "").strip()
    if text in ("", "None", "none", "null", "{}"):
        return None

    def bad(why: str):
        return ConfigError(f"{owner}.sweep: cannot read {text!r}: {why}; write name=value,value,... per "
                           f"hyperparameter, apart by ';', e.g. {SWEEP_EXAMPLE}")
    if text.startswith("{"):
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise bad("not a YAML mapping") from None
        if not isinstance(value, dict):
            raise bad("not a mapping")
        items = [(str(k), v if isinstance(v, (list, tuple)) else [v]) for k, v in value.items()]
    else:
        items = []
        for part in (p.strip() for p in text.replace("\n", ";").split(";")):
            if not part:
                continue
            name, eq, values = part.partition("=")
            name = name.strip()
            if not eq or not name.isidentifier():
                raise bad(f"{part!r} is not name=value,value")
            items.append((name, [v for v in values.replace(",", " ").split()]))
    sweep = {}
    for name, values in items:
        if name in sweep:
            raise bad(f"{name} is given twice")
        if not values:
            raise bad(f"{name} has no values")
        numbers = []
        for v in values:
            try:
                if isinstance(v, bool):
                    raise ValueError
                numbers.append(float(v))
            except (TypeError, ValueError):
                raise bad(f"{name}'s value {v!r} is not a number") from None
        sweep[name] = numbers
    return sweep


class ConfigForm(widgets.VBox):
    """Every field of a config class (less `exclude`), with its doc beside it.

    form.values() -> {name: value} (typed; ConfigError names a bad field); form.inputs[name];
    form.set(**values). The rows of the fields in `apart` are left out of the form's own column (the
    panel shows them elsewhere: form.rows[name]); their values are the form's all the same."""

    def __init__(self, cls, values: dict | None = None, exclude=(), apart=(), **kwargs):
        self.cls = cls
        self.exclude = tuple(exclude)
        self.apart = tuple(apart)
        self.fields = {}
        self.inputs = {}
        self.rows = {}
        rows = []
        values = dict(values or {})
        for name, kind, default, doc in cfg.describe(cls):
            if name in self.exclude or (name == "lr" and cls is cfg.DDPGConfig):  # DDPG: actor_lr and critic_lr
                continue
            value = values.get(name, default)
            widget = field_widget(name, kind, default, value, doc)
            self.fields[name] = (kind, default, doc)
            self.inputs[name] = widget
            note = widgets.HTML(f'<span style="color:#666;font-size:11px;line-height:1.2">{html.escape(doc)}</span>',
                                layout=widgets.Layout(width="auto", max_width="560px"))
            self.rows[name] = widgets.HBox([widget, note], layout=widgets.Layout(align_items="center"))
            if name not in self.apart:
                rows.append(self.rows[name])
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        header = widgets.HTML(f'<b>{cls.__name__}</b> <span style="color:#666">{html.escape(doc)}</span>')
        super().__init__([header, *rows], **kwargs)
        self.add_class("wb-config-form")

    def show_gpu_fields(self, shown: bool) -> None:
        """Show or hide the fields that only act on a GPU target (cuda_graph)."""
        for name in GPU_ONLY:
            if name in self.rows:
                self.rows[name].layout.display = "" if shown else "none"

    def values(self) -> dict:
        return {name: parse_field(self.cls.__name__, name, kind, default, self.inputs[name])
                for name, (kind, default, _doc) in self.fields.items()}

    def changed(self) -> dict:
        """{name: widget value} of the fields whose value differs from the class default (a field
        that does not parse counts as changed: it is what the user typed)."""
        out = {}
        for name, (kind, default, _doc) in self.fields.items():
            try:
                same = parse_field(self.cls.__name__, name, kind, default, self.inputs[name]) == default
            except ConfigError:
                same = False
            if not same:
                out[name] = self.inputs[name].value
        return out

    def set(self, **values) -> None:
        """Set fields by name; ConfigError naming a field unknown or of the wrong type, and then no
        field is changed."""
        unknown = [name for name in values if name not in self.inputs]
        if unknown:
            raise ConfigError(f"{self.cls.__name__} has no field(s) {unknown} in this form; "
                              f"fields: {list(self.inputs)}")
        before = {name: self.inputs[name].value for name in values}
        for name, value in values.items():
            widget = self.inputs[name]
            try:
                widget.value = _text(value, name) if isinstance(widget, widgets.Text) else value
            except traitlets.TraitError:
                for done, old in before.items():
                    self.inputs[done].value = old
                kind = {widgets.IntText: "an integer", widgets.FloatText: "a number",
                        widgets.Checkbox: "True or False"}.get(type(widget), "a value")
                raise ConfigError(f"{self.cls.__name__}.{name} must be {kind}, got {value!r} (its default is "
                                  f"{self.fields[name][1]!r})") from None


# ---- env parameters -------------------------------------------------------------------------------

def agent_params(env_name: str) -> list:
    """The integer PARAMS of `env_name` that change its agent count (found by trying each + 1)."""
    from workbench.runtime import registry
    base = registry.definition(env_name)
    found = []
    for name, value in base.params.items():
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            try:
                if registry.definition(env_name, **{name: int(value) + 1}).num_agents != base.num_agents:
                    found.append(name)
            except Exception:  # noqa: BLE001 - a value its validate_params refuses: not an agent count
                pass
    return found


def is_flag(default, doc: str) -> bool:
    """A 0/1 int parameter whose doc starts with "Whether" is a switch: shown as a checkbox."""
    return (isinstance(default, bool) or (isinstance(default, (int, np.integer)) and default in (0, 1)
                                          and doc.lower().startswith("whether")))


def definition_key(entry) -> tuple:
    """What defines a registered env (a registry.EnvSource): its sources and registration parameters."""
    return entry.language, entry.source, entry.c_source, entry.params


def env_param_value(env_name: str, name: str, kind, default, value):
    """`value` given for the env parameter `name` as its widget holds it (a flag: bool); ConfigError
    naming the parameter, the value and its type otherwise."""
    try:
        if kind is bool:
            if value in (0, 1) and not isinstance(value, float) or isinstance(value, (bool, np.bool_)):
                return bool(value)
        elif kind in (int, float) and not isinstance(value, (bool, np.bool_)):
            number = float(value)
            if kind is float:
                return number
            if number.is_integer():
                return int(number)
        elif kind is not float and kind is not int:
            return value
    except (TypeError, ValueError):
        pass
    what = {bool: "0 or 1 (a switch)", int: "an integer", float: "a number"}[kind]
    raise ConfigError(f"env {env_name!r} parameter {name}: {value!r} is not {what}; its default is {default!r}")


class EnvParamsForm(widgets.VBox):
    """The PARAMS of one env, each with its doc from the env's PARAM_DOCS; its agent-count
    parameters apart, on top, with the resulting count; 0/1 switches as checkboxes.

    form.values() -> the parameters shown that differ from the env's registered defaults now (what
    config.env_params holds); form.changed() -> those that differ from the defaults the form was
    built with (the user's changes); form.outdated() -> whether the env was registered again since
    (its source or registration parameters changed: rebuild the form); form.num_agents() -> the
    agent count these values give."""

    def __init__(self, env_name: str, values: dict | None = None, **kwargs):
        from workbench.runtime import registry
        self.env_name = env_name
        self.registered = definition_key(registry.lookup(env_name))
        defn = registry.definition(env_name)
        self.definition = defn
        self.defaults = dict(defn.params)
        self.docs = dict(defn.namespace.get("PARAM_DOCS", {}) or {})
        self.agent_names = agent_params(env_name)
        values = dict(values or {})
        unknown = sorted(set(values) - set(self.defaults))
        if unknown:
            raise ConfigError(f"env {env_name!r} has no parameter(s) {unknown}; its PARAMS: {sorted(self.defaults)}")
        self.inputs = {}
        self.kinds = {}
        rows = []
        for name, default in self.defaults.items():
            kind = type(default) if isinstance(default, (bool, int, float, str)) else object
            if isinstance(default, np.integer):
                kind = int
            doc = self.docs.get(name, "")
            tooltip = f"{doc} (default {default!r})" if doc else f"{env_name} parameter {name} (default {default!r})"
            flag = is_flag(default, doc)
            value = env_param_value(env_name, name, bool if flag else kind, default, values.get(name, default))
            widget = field_widget(name, bool if flag else kind, default, value, tooltip)
            self.kinds[name] = kind
            self.inputs[name] = widget
            if name not in self.agent_names:
                note = widgets.HTML(f'<span style="color:#666;font-size:11px;line-height:1.2">'
                                    f'{html.escape(doc or f"default {default!r}")}</span>',
                                    layout=widgets.Layout(width="auto", max_width="560px"))
                rows.append(widgets.HBox([widget, note], layout=widgets.Layout(align_items="center")))
        self.agent_count = widgets.HTML(layout=widgets.Layout(margin="0 0 0 8px"))
        self.agent_count.add_class("wb-agent-count")
        for name in self.agent_names:
            self.inputs[name].observe(lambda _change: self._update_count(), names="value")
            self.inputs[name].layout.width = "300px"
        agents_row = widgets.HBox([widgets.HTML("<b>Agents</b>", layout=widgets.Layout(width="60px")),
                                   *[self.inputs[n] for n in self.agent_names], self.agent_count],
                                  layout=widgets.Layout(align_items="center", flex_flow="row wrap"))
        hint = widgets.HTML('<span style="color:#666;font-size:11px">Parameters are compile-time constants: '
                            'changed values compile a variant of the env when the run starts.</span>')
        super().__init__([agents_row, *rows, hint], **kwargs)
        self.add_class("wb-env-params")
        self._update_count()

    def shown(self) -> dict:
        """Every parameter's value as the form shows it."""
        return {name: parse_field(self.env_name, name, self.kinds[name], default, self.inputs[name])
                for name, default in self.defaults.items()}

    def changed(self) -> dict:
        return {k: v for k, v in self.shown().items() if v != self.defaults[k]}

    def values(self) -> dict:
        from workbench.runtime import registry
        # against the definition registered now: a value the form shows is asked for whatever the
        # defaults were when the form was built
        current = self.defaults if not self.outdated() else registry.definition(self.env_name).params
        return {k: v for k, v in self.shown().items() if k not in current or v != current[k]}

    def outdated(self) -> bool:
        from workbench.runtime import registry
        return definition_key(registry.lookup(self.env_name)) != self.registered

    def num_agents(self) -> int:
        from workbench.runtime import registry
        return registry.definition(self.env_name, **self.values()).num_agents

    def _update_count(self):
        try:
            n = self.num_agents()
            fixed = "" if self.agent_names else " (fixed by the env)"
            self.agent_count.value = f"<b>{n}</b> agent{'s' if n != 1 else ''} per replica{fixed}"
        except Exception as exc:  # noqa: BLE001 - a count the env refuses: say why, next to the fields
            self.agent_count.value = f'<span style="color:#b00">{html.escape(str(exc))}</span>'
