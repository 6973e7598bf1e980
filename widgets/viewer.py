"""The panel's rollout viewer: the episodes a run pulls every `record_every` iterations, animated
under the curves by workbench.notebook.render's HTML player. The run's thread only hands them over; the
panel's redraw thread animates them, so drawing frames never holds up the run."""
from __future__ import annotations

import threading

import ipywidgets as widgets


class EpisodeViewer:
    """title (HTML) over output (an ipywidgets.Output holding the player); animation: the last
    one shown (None before any)."""

    def __init__(self, max_frames: int = 300, dpi: int = 72):
        self.max_frames = max_frames
        self.dpi = dpi
        self.title = widgets.HTML("")
        self.output = widgets.Output(layout=widgets.Layout(max_width="100%"))
        self.output.add_class("wb-viewer")
        self.animation = None
        self._pending = None
        self._lock = threading.Lock()

    def hand_over(self, trajectories, env, iteration: int) -> None:
        """Keep the episodes pulled at `iteration` for the next show_pending (the latest wins)."""
        with self._lock:
            self._pending = (trajectories, env, iteration)

    def new_run(self, continued: bool) -> None:
        """A run starts: episodes not shown yet are dropped; a new run (not a `continued` one)
        also forgets the last animation and clears the viewer (a run that records nothing must not
        show an earlier run's episodes)."""
        with self._lock:
            self._pending = None
        if not continued:
            self.animation = None
            self.title.value = ""
            self.output.outputs = ()

    def show_pending(self) -> None:
        """Animate the episodes handed over since the last call, if any."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            self._show(*pending)

    def _show(self, trajectories, env, iteration):
        from workbench.notebook import render
        anim = render.show(trajectories, env, max_frames=self.max_frames, dpi=self.dpi)
        self.animation = anim
        replicas = ", ".join(str(t.get("replica")) for t in trajectories)
        self.title.value = (f"<b>Rollout viewer</b> <span style='color:#666'>last episode of replica(s) "
                            f"{replicas}, pulled at iteration {iteration}</span>")
        self.output.outputs = ({"output_type": "display_data", "metadata": {},
                                "data": {"text/html": anim.to_html(),
                                         "text/plain": f"<rollout animation of replica(s) {replicas}>"}},)
