"""``envfarm dashboard``: a browser view of farm runs, trajectories, training and harness results."""
