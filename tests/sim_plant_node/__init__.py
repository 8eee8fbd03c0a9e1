"""Tests of ``sim_plant_node``: the ``sim-plant`` command as a Cyphal node speaking the UDRAL servo interface."""
