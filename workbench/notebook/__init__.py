"""The notebook front end below the widgets: the `%%warpenv` magic and the rollout viewer's drawing
(render: frames, players, video; drawers: the base drawers envs build on)."""
