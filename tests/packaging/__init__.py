"""The package as a user installs it: the built sdist and wheel, and the wheel installed into a fresh venv."""
