from kiln.dataset.mindrecord import FileWriter  # noqa: F401  (MindSpore: mindspore.mindrecord.FileWriter)
