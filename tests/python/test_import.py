import kiln


def test_the_extension_module_is_loaded_from_the_package():
    assert kiln._kiln.__name__ == "kiln._kiln"
    assert hasattr(kiln._kiln, "dataset")
