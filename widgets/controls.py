"""The panel's controls for what to run: training or rollouts alone, env, target, GPUs, replicas,
algorithm, the rollout policy (random actions or a checkpoint's), the episodes to animate, the
device line of the chosen target, and the forms generated from the algorithm's config class and
the env's PARAMS. `RunForm.spec()` reads them into the RunSpec that a Runner runs.

The env list and the env's form follow the registry: an env registered (or a %%warpenv cell re-run)
after the panel was built is offered, and its form rebuilt, when the panel is displayed again, set()
names an env, or a run starts (`RunForm.sync_registry`)."""
from __future__ import annotations

import ipywidgets as widgets

from workbench.learn import config as cfg
from workbench.learn.config import ConfigError

from .device import device_line
from .form import POPULATION, ConfigForm, EnvParamsForm
from .checks import (CONTROLLED, check_choice, check_config_fields, check_integer, check_rank_choice,
                     check_training_run, checked_env_form, checked_fields, checked_gpus, checkpoint_env_params,
                     checkpoint_text, gpu_limit, rank_choices, redefined_notice, replicas_text)
from .jobs import checkpoint_env
from .runner import RunSpec

MODES = ("train", "rollouts")


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
        targets = sorted(set(wb.available_targets() + ["auto"]), key=lambda t: t != "auto")
        target = target or wb.best_target()
        check_choice("algorithm", algorithm, list(cfg.ALGORITHMS))
        check_choice("env", env, wb.env_names())
        check_choice("target", target, targets, " here")
        check_choice("mode", mode, MODES)
        record_every = check_integer("record_every", record_every, 0, "0: never")
        self.policies = policies
        self.on_change = None  # called (no arguments) when any control or field changes
        self.on_notice = None  # called with a notice (the env's form rebuilt after a %%warpenv cell re-ran)
        self._syncing = False
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
        self.target = widgets.Dropdown(options=targets, value=target, description="target", style=style,
                                       tooltip=cfg.RunConfig.__dataclass_fields__["target"].metadata["doc"],
                                       layout=widgets.Layout(width="200px"))
        self.gpus = widgets.BoundedIntText(value=1, min=1, max=1, description="GPUs", style=style,
                                           tooltip="data-parallel ranks (torchrun), one per GPU",
                                           layout=widgets.Layout(width="140px"))
        num_envs = cfg.RunConfig.num_envs if num_envs is None else check_integer("num_envs", num_envs, 1, "replicas")
        self.num_envs = widgets.IntText(value=num_envs, description="replicas",
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
        self.record_every = widgets.BoundedIntText(value=record_every, min=0, max=10**9,
                                                   description="animate an episode every",
                                                   style={"description_width": "initial"},
                                                   tooltip="pull and animate the last episode of the replicas "
                                                           "every this many iterations (0: never)",
                                                   layout=widgets.Layout(width="250px"))
        self.record_every_unit = widgets.HTML("iterations (0: never),")
        self.record_replicas = widgets.Text(value=replicas_text(record_replicas),
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
        checked_fields(cfg.ALGORITHMS[algorithm], dict(config), None, True, self.record_replicas.value, num_envs, mode)
        self._build_env_form(env_params)

        self.env_name.observe(lambda _c: self._syncing or self._build_env_form(None), names="value")
        self.algorithm.observe(lambda _c: self._build_config_form(None), names="value")
        self.target.observe(lambda _c: self.refresh(), names="value")
        self.mode.observe(lambda _c: self.refresh(), names="value")
        self.policy.observe(lambda _c: self.refresh(), names="value")
        self.refresh()
        self.gpus.value = checked_gpus(gpus, self.target.value, self.mode.value)
        for control in (self.mode, self.env_name, self.target, self.gpus, self.num_envs, self.algorithm, self.policy,
                        self.checkpoint, self.record_every, self.record_replicas):
            control.observe(self._changed, names="value")

    def _changed(self, _change=None):
        if self.on_change is not None and not self._syncing:
            self.on_change()

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
        # what the user changed from the old algorithm's defaults goes on; the rest takes the new one's
        values = self.config_form.changed() if self.config_form is not None else {}
        check_config_fields(cls, overrides or {})
        form = ConfigForm(cls, exclude=CONTROLLED, apart=POPULATION)
        for name, value in values.items():
            if name in form.inputs and type(form.inputs[name]) is type(self.config_form.inputs[name]):
                form.inputs[name].value = value
        if overrides:
            form.set(**overrides)
        form.show_gpu_fields(self.target.value != "cpu")
        for widget in form.inputs.values():
            widget.observe(self._changed, names="value")
        self.config_form = form
        self._offer_rank_choices()
        self.population.children = [widgets.HTML(
            "<b>Population</b> <span style='color:#666;font-size:12px'>seeds x the settings of sweep, trained "
            "at once as one program (member k has seed + k); the curves show the median and the interquartile "
            "band over the members</span>"), *(form.rows[n] for n in POPULATION if n in form.rows)]
        self._update_accordion()

    def _build_env_form(self, env_params: dict | None, form: EnvParamsForm | None = None):
        self.env_form = form or EnvParamsForm(self.env_name.value, env_params)
        for widget in self.env_form.inputs.values():
            widget.observe(self._changed, names="value")
        self._offer_rank_choices()
        self._update_accordion()
        self._changed()

    def _offer_rank_choices(self):
        if self.config_form is not None and self.env_form is not None and "rank_by" in self.config_form.inputs:
            self.config_form.inputs["rank_by"].options = rank_choices(self.env_form.definition, self.policies)

    def sync_registry(self) -> str:
        """Offer the envs registered now in the env list, and rebuild the env's form when its env was
        registered again since the form was built (a %%warpenv cell re-run), keeping the values the
        user changed that the new definition still has. Returns the notice ("" when nothing changed),
        also handed to on_notice."""
        import workbench as wb
        names = wb.env_names()  # (the registry only adds names, and replaces definitions)
        if list(self.env_name.options) != names:
            chosen, self._syncing = self.env_name.value, True
            try:  # new options select their first: the chosen env stays, its form too
                self.env_name.options = names
                self.env_name.value = chosen
            finally:
                self._syncing = False
        if not self.env_form.outdated():
            return ""
        changed, form = self.env_form.changed(), EnvParamsForm(self.env_name.value)
        kept = {k: v for k, v in changed.items() if k in form.defaults}
        try:
            form = EnvParamsForm(form.env_name, kept) if kept else form
        except ConfigError:  # a value the new definition's type refuses
            kept = {}
        self._build_env_form(None, form)
        notice = redefined_notice(form.env_name, self._agents_text(), kept,
                                  {k: v for k, v in changed.items() if k not in kept})
        if self.on_notice is not None:
            self.on_notice(notice)
        return notice

    def _update_accordion(self):
        if self.config_form is None or self.env_form is None:
            return
        self.forms.children = [self.config_form, self.env_form]
        self.forms.titles = (f"Hyperparameters: {self.config_form.cls.__name__}",
                             f"Env parameters: {self.env_name.value} ({self._agents_text()})")

    def _agents_text(self) -> str:
        try:
            n = self.env_form.num_agents()
            return f"{n} agent{'s' if n != 1 else ''}"
        except Exception:  # noqa: BLE001 - values the env refuses: the form says why
            return "agent count invalid"

    # -- what the controls show -----------------------------------------------------------------
    def refresh(self):
        """Show and enable the controls that the mode, target and policy call for."""
        limit = gpu_limit(self.target.value)
        self.gpus.max = limit
        self.gpus.disabled = limit == 1 or self.mode.value != "train"
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
        record_every, gpus, checkpoint, record_replicas, and env parameters as env_params={...}.
        Every value is checked before any is set: ConfigError names the field, the value and what it
        may be, and a refused call changes nothing."""
        if "env" in values:
            self.sync_registry()  # an env registered since the panel was built
        env = values.get("env", self.env_name.value)
        check_choice("env", env, list(self.env_name.options))
        algorithm = values.get("algorithm", self.algorithm.value)
        check_choice("algorithm", algorithm, list(cfg.ALGORITHMS))
        target = values.get("target", self.target.value)
        check_choice("target", target, list(self.target.options), " here")
        mode = values.get("mode", self.mode.value)
        check_choice("mode", mode, MODES)
        checked = {"env": env, "algorithm": algorithm, "target": target, "mode": mode}
        if "num_envs" in values:
            checked["num_envs"] = check_integer("num_envs", values["num_envs"], 1, "env replicas")
        if "record_every" in values:
            checked["record_every"] = check_integer("record_every", values["record_every"], 0, "0: never")
        if "gpus" in values:
            checked["gpus"] = checked_gpus(values["gpus"], target, mode)
        if "record_replicas" in values:
            checked["record_replicas"] = replicas_text(values["record_replicas"])
        if "checkpoint" in values:
            checked["checkpoint"] = checkpoint_text(values["checkpoint"])
        env_form = None
        if "env_params" in values or env != self.env_name.value:
            env_form = checked_env_form(env, values.get("env_params"))
        fields = {k: v for k, v in values.items() if k not in checked and k not in ("env_params", "checkpoint")}
        check_config_fields(cfg.ALGORITHMS[algorithm], fields)
        if isinstance(fields.get("rank_by"), str):
            check_rank_choice(cfg.ALGORITHMS[algorithm], fields["rank_by"], env_form or self.env_form, self.policies)
        checked_fields(cfg.ALGORITHMS[algorithm], fields, self.config_form, algorithm == self.algorithm.value,
                       checked.get("record_replicas"), checked.get("num_envs", self.num_envs.value), mode)
        order = ("env", "algorithm", "mode", "target", "num_envs", "record_every", "gpus")  # env, algorithm: new forms
        for name in [n for n in order if n in checked]:
            (self.env_name if name == "env" else getattr(self, name)).value = checked[name]
        if env_form is not None:
            self._build_env_form(None, env_form)
        if "checkpoint" in checked:
            self.checkpoint.value = checked["checkpoint"]
            self.policy.value = "checkpoint" if checked["checkpoint"] else "random"
        if "record_replicas" in checked:
            self.record_replicas.value = checked["record_replicas"]
        if fields:
            self.config_form.set(**fields)
        self._update_accordion()

    def spec(self) -> RunSpec:
        """The RunSpec the fields describe (ConfigError names a bad field), after sync_registry.
        Rollouts of a checkpoint run the env and env parameters its policies were trained on, and
        record those: the form's env must be the checkpoint's, and env parameters changed in the form
        must agree with the checkpoint's (ConfigError otherwise, naming both)."""
        checkpoint = self.checkpoint.value.strip() if self.policy.value == "checkpoint" else None
        rollouts = self.mode.value == "rollouts"
        if rollouts and self.policy.value == "checkpoint" and not checkpoint:
            raise ConfigError("policy 'checkpoint' needs the checkpoint's path")
        trained_on = checkpoint_env(checkpoint) if rollouts and checkpoint else None  # registers its env first
        self.sync_registry()
        values = self.config_form.values()
        if rollouts:  # rollouts step one env with one policy: no population
            values.update(seeds=1, sweep=None)
        env_params = self.env_form.values()
        if trained_on is not None:
            env_params = checkpoint_env_params(checkpoint, self.env_name.value, self.env_form.defaults, *trained_on,
                                               env_params)
        data = {**values, "env": self.env_name.value, "num_envs": self.num_envs.value, "target": self.target.value,
                "env_params": env_params or None}
        config = cfg.from_dict(data, self.config_form.cls)
        if not rollouts:  # (refused here, Start writes no run folder and adds no run)
            check_training_run(config, self.env_form, self.policies)
        try:
            replicas = tuple(int(r) for r in self.record_replicas.value.replace(",", " ").split())
        except ValueError:
            raise ConfigError(f"record_replicas (replicas to animate) must be integers like '0, 1', got "
                              f"{self.record_replicas.value!r}") from None
        return RunSpec(config=config, mode=self.mode.value, checkpoint=checkpoint or None,
                       record_every=self.record_every.value, record_replicas=replicas or (0,),
                       world_size=self.gpus.value if self.mode.value == "train" else 1, policies=self.policies)
