"""The panel's controls for what to run: training or rollouts alone, env, target, GPUs, replicas,
algorithm, the rollout policy (random actions or a checkpoint's), the episodes to animate, the
device line of the chosen target, and the forms generated from the algorithm's config class and
the env's PARAMS. `RunForm.spec()` reads them into the RunSpec that a Runner runs."""
from __future__ import annotations

import ipywidgets as widgets

from workbench.learn import config as cfg
from workbench.learn.config import ConfigError

from .device import device_line, gpu_count
from .form import POPULATION, ConfigForm, EnvParamsForm
from .runner import RunSpec

# fields that the panel's own controls set (env, replicas, target, env parameters) or that the
# algorithm choice fixes; every other field of the config class is in the generated form
CONTROLLED = ("env", "num_envs", "target", "env_params", "algorithm")


class RunForm:
    """The controls as widget attributes (mode, env_name, target, gpus, num_envs, algorithm, policy,
    checkpoint, record_every, record_replicas, device_info), the Accordion `forms` holding
    `config_form` and `env_form`, and `population`: the config form's seeds and sweep fields on a
    row of their own (seeds x the sweep's settings, trained at once). rows(layout) lays them out;
    spec() reads them, set() writes them, lock() disables them while a run goes."""

    # the widgets that the panel holds as its own attributes too (panel.num_envs.value = 64)
    WIDGETS = ("device_info", "mode", "env_name", "target", "gpus", "num_envs", "algorithm", "policy", "checkpoint",
               "record_every", "record_every_unit", "record_replicas", "hint", "rollout_row", "population", "forms")

    def __init__(self, env: str, *, mode: str, algorithm: str, target: str | None, num_envs: int | None,
                 env_params: dict | None, checkpoint: str | None, record_every: int, record_replicas, gpus: int,
                 policies: dict | None, config: dict):
        import workbench as wb
        if algorithm not in cfg.ALGORITHMS:
            raise ConfigError(f"algorithm must be one of {sorted(cfg.ALGORITHMS)}, got {algorithm!r}")
        if env not in wb.env_names():
            raise ConfigError(f"unknown env {env!r}; known envs: {wb.env_names()}")
        targets = wb.available_targets()
        target = target or wb.best_target()
        if target not in targets + ["auto"]:
            raise ConfigError(f"target {target!r} is not available here; available: {targets}")
        self.policies = policies
        style = {"description_width": "70px"}
        self.device_info = widgets.HTML(layout=widgets.Layout(margin="0 0 4px 0"))
        self.device_info.add_class("wb-device")
        self.mode = widgets.ToggleButtons(options=[("Train", "train"), ("Rollouts only", "rollouts")], value=mode,
                                          tooltips=["learn with the algorithm below",
                                                    "step the env with random actions or a checkpoint's policy: "
                                                    "throughput and animations without learning"],
                                          style={"button_width": "110px"})
        self.env_name = widgets.Dropdown(options=wb.env_names(), value=env, description="env", style=style,
                                         tooltip="the registered env (python -m workbench envs lists them)",
                                         layout=widgets.Layout(width="260px"))
        self.target = widgets.Dropdown(options=sorted(set(targets + ["auto"]), key=lambda t: t != "auto"),
                                       value=target, description="target", style=style,
                                       tooltip=cfg.RunConfig.__dataclass_fields__["target"].metadata["doc"],
                                       layout=widgets.Layout(width="200px"))
        self.gpus = widgets.BoundedIntText(value=1, min=1, max=1, description="GPUs", style=style,
                                           tooltip="data-parallel ranks (torchrun), one per GPU",
                                           layout=widgets.Layout(width="140px"))
        self.num_envs = widgets.IntText(value=int(num_envs or cfg.RunConfig.num_envs), description="replicas",
                                        style=style, tooltip=cfg.RunConfig.__dataclass_fields__["num_envs"]
                                        .metadata["doc"], layout=widgets.Layout(width="200px"))
        self.num_envs.add_class("wb-field-num_envs")
        self.algorithm = widgets.Dropdown(options=[(k.upper(), k) for k in cfg.ALGORITHMS], value=algorithm,
                                          description="algorithm", style=style,
                                          tooltip="; ".join(f"{k.upper()}: {(c.__doc__ or '').strip()}"
                                                            for k, c in cfg.ALGORITHMS.items()),
                                          layout=widgets.Layout(width="200px"))
        self.policy = widgets.Dropdown(options=[("uniformly random", "random"), ("checkpoint", "checkpoint")],
                                       value="checkpoint" if checkpoint else "random", description="policy",
                                       style=style, layout=widgets.Layout(width="260px"))
        self.checkpoint = widgets.Text(value=str(checkpoint or ""), placeholder="path/to/checkpoint.pt",
                                       description="checkpoint", style={"description_width": "initial"},
                                       layout=widgets.Layout(width="420px"),
                                       tooltip="a file written by Trainer.save or the CLI (its env and "
                                               "parameters are used; replicas and target are the panel's)")
        self.record_every = widgets.BoundedIntText(value=int(record_every), min=0, max=10**9,
                                                   description="animate an episode every",
                                                   style={"description_width": "initial"},
                                                   tooltip="pull and animate the last episode of the replicas "
                                                           "every this many iterations (0: never)",
                                                   layout=widgets.Layout(width="250px"))
        self.record_every_unit = widgets.HTML("iterations (0: never),")
        self.record_replicas = widgets.Text(value=", ".join(str(r) for r in record_replicas),
                                            description="of replicas", style={"description_width": "initial"},
                                            tooltip="replica indices to animate, e.g. 0, 1",
                                            layout=widgets.Layout(width="170px"))
        self.hint = widgets.HTML("")
        self.rollout_row = widgets.HBox([self.policy, self.checkpoint])

        self.population = widgets.VBox([], layout=widgets.Layout(margin="2px 0"))
        self.population.add_class("wb-population")
        self.config_form = None
        self.env_form = None
        self.forms = widgets.Accordion(children=[], layout=widgets.Layout(max_width="980px"))
        self.forms.add_class("wb-forms")
        self._build_config_form(dict(config))
        self._build_env_form(env_params)

        self.env_name.observe(lambda _c: self._build_env_form(None), names="value")
        self.algorithm.observe(lambda _c: self._build_config_form(None), names="value")
        self.target.observe(lambda _c: self.refresh(), names="value")
        self.mode.observe(lambda _c: self.refresh(), names="value")
        self.policy.observe(lambda _c: self.refresh(), names="value")
        self.refresh()
        if int(gpus) != 1:
            if self.gpus.disabled or not 1 <= int(gpus) <= self.gpus.max:
                raise ConfigError(f"gpus={gpus}: data-parallel ranks are one per GPU, for training on a GPU target; "
                                  f"here {gpu_count()} GPU(s) and target {self.target.value!r} (use gpus=1)")
            self.gpus.value = int(gpus)

    def rows(self, layout) -> list:
        """The controls' rows, top to bottom (each row of widgets an HBox with `layout`)."""
        return [widgets.HBox([self.mode, self.env_name, self.target, self.gpus], layout=layout),
                widgets.HBox([self.num_envs, self.algorithm], layout=layout),
                self.population,
                widgets.HBox([self.record_every, self.record_every_unit, self.record_replicas], layout=layout),
                self.rollout_row, self.hint, self.forms]

    # -- the generated forms ------------------------------------------------------------------
    def _build_config_form(self, overrides: dict | None):
        cls = cfg.ALGORITHMS[self.algorithm.value]
        values = {}
        if self.config_form is not None:  # keep what the user typed in fields both classes have
            for name, widget in self.config_form.inputs.items():
                values[name] = widget.value
        names = {name for name, *_ in cfg.describe(cls)}
        if overrides:
            clash = sorted(set(overrides) & set(CONTROLLED))
            if clash:
                raise ConfigError(f"{clash} are set by the panel's own arguments (env=..., num_envs=..., "
                                  f"target=..., env_params=..., algorithm=...), not as config fields")
            unknown = sorted(set(overrides) - names)
            if unknown:
                raise ConfigError(f"unknown {cls.__name__} field(s) {unknown}; "
                                  f"fields: {sorted(names - set(CONTROLLED))}")
        form = ConfigForm(cls, exclude=CONTROLLED, apart=POPULATION)
        for name, value in values.items():
            if name in form.inputs and type(form.inputs[name]) is type(self.config_form.inputs[name]):
                form.inputs[name].value = value
        if overrides:
            form.set(**overrides)
        form.show_gpu_fields(self.target.value != "cpu")
        self.config_form = form
        self.population.children = [widgets.HTML(
            "<b>Population</b> <span style='color:#666;font-size:12px'>seeds x the settings of sweep, trained "
            "at once as one program (member k has seed + k); the curves show the median and the interquartile "
            "band over the members</span>"), *(form.rows[n] for n in POPULATION if n in form.rows)]
        self._update_accordion()

    def _build_env_form(self, env_params: dict | None):
        self.env_form = EnvParamsForm(self.env_name.value, env_params)
        self._update_accordion()

    def _update_accordion(self):
        if self.config_form is None or self.env_form is None:
            return
        self.forms.children = [self.config_form, self.env_form]
        try:
            n = self.env_form.num_agents()
            agents = f"{n} agent{'s' if n != 1 else ''}"
        except Exception:  # noqa: BLE001 - values the env refuses: the form says why
            agents = "agent count invalid"
        self.forms.titles = (f"Hyperparameters: {self.config_form.cls.__name__}",
                             f"Env parameters: {self.env_name.value} ({agents})")

    # -- what the controls show -----------------------------------------------------------------
    def refresh(self):
        """Show and enable the controls that the mode, target and policy call for."""
        n_gpus = gpu_count()
        on_gpu = self.target.value in ("cuda", "cuda-c", "auto") and n_gpus > 1
        self.gpus.max = max(1, n_gpus) if on_gpu else 1
        self.gpus.disabled = not on_gpu or self.mode.value != "train"
        if self.gpus.disabled:
            self.gpus.value = 1
        rollouts = self.mode.value == "rollouts"
        if self.config_form is not None:
            self.config_form.show_gpu_fields(self.target.value != "cpu")
        self.rollout_row.layout.display = "" if rollouts else "none"
        self.population.layout.display = "none" if rollouts else ""  # rollouts step one env, no members
        self.checkpoint.layout.display = "" if self.policy.value == "checkpoint" else "none"
        self.algorithm.disabled = rollouts
        self.hint.value = ("<span style='color:#666;font-size:12px'>Rollouts only use total_env_steps, "
                           "rollout_length (steps per iteration), log_every and seed of the form below; a "
                           "checkpoint brings its own env parameters.</span>" if rollouts else "")
        self.show_device()

    def show_device(self):
        """Update the device line (the chosen target's device and its memory in use now)."""
        self.device_info.value = device_line(self.target.value, self.gpus.value)

    def lock(self, running: bool):
        """Disable the controls while a run goes; enable those that apply once it ended."""
        for control in (self.mode, self.env_name, self.target, self.num_envs, self.record_every,
                        self.record_replicas, self.policy, self.checkpoint):
            control.disabled = running
        self.algorithm.disabled = running or self.mode.value == "rollouts"
        if not running:
            self.refresh()

    # -- reading and writing the values ------------------------------------------------------------
    def set(self, **values) -> None:
        """Set fields by name: config fields, or env, num_envs, target, algorithm, mode,
        record_every, gpus, checkpoint, record_replicas, and env parameters as env_params={...}."""
        controls = {"env": self.env_name, "num_envs": self.num_envs, "target": self.target,
                    "algorithm": self.algorithm, "mode": self.mode, "record_every": self.record_every,
                    "gpus": self.gpus}
        for name in [n for n in ("env", "algorithm") if n in values]:  # these rebuild the forms first
            controls[name].value = values.pop(name)
        for name, value in list(values.items()):
            if name in controls:
                controls[name].value = value
            elif name == "checkpoint":
                self.checkpoint.value = str(value or "")
                self.policy.value = "checkpoint" if value else "random"
            elif name == "env_params":
                self._build_env_form(value)
            elif name == "record_replicas":
                self.record_replicas.value = ", ".join(str(r) for r in value)
            else:
                self.config_form.set(**{name: value})
        self._update_accordion()

    def spec(self) -> RunSpec:
        """The RunSpec the fields describe (ConfigError names a bad field)."""
        values = self.config_form.values()
        if self.mode.value == "rollouts":  # rollouts step one env with one policy: no population
            values.update(seeds=1, sweep=None)
        env_params = self.env_form.values()
        data = {**values, "env": self.env_name.value, "num_envs": self.num_envs.value, "target": self.target.value,
                "env_params": env_params or None}
        config = cfg.from_dict(data, self.config_form.cls)
        try:
            replicas = tuple(int(r) for r in self.record_replicas.value.replace(",", " ").split())
        except ValueError:
            raise ConfigError(f"replicas to animate must be integers like '0, 1', got "
                              f"{self.record_replicas.value!r}") from None
        checkpoint = self.checkpoint.value.strip() if self.policy.value == "checkpoint" else None
        if self.mode.value == "rollouts" and self.policy.value == "checkpoint" and not checkpoint:
            raise ConfigError("policy 'checkpoint' needs the checkpoint's path")
        return RunSpec(config=config, mode=self.mode.value, checkpoint=checkpoint or None,
                       record_every=self.record_every.value, record_replicas=replicas or (0,),
                       world_size=self.gpus.value if self.mode.value == "train" else 1, policies=self.policies)
