"""Accepting an invitation link by creating an account (when local sign-in is on)."""
from django import forms
from django.contrib.auth import get_user_model, password_validation


class JoinForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="Letters, digits and @/./+/-/_ only.")
    password1 = forms.CharField(label="Password", strip=False,
                                widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
                                help_text=password_validation.password_validators_help_text_html())
    password2 = forms.CharField(label="Password again", strip=False,
                                widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}))

    def clean_username(self):
        username = self.cleaned_data["username"]
        get_user_model().username_validator(username)
        if get_user_model().objects.filter(username=username).exists():
            raise forms.ValidationError("This username is taken; choose another.")
        return username

    def clean(self):
        data = super().clean()
        if data.get("password1") and data.get("password1") != data.get("password2"):
            self.add_error("password2", "The two passwords differ.")
        elif data.get("password1"):
            user = get_user_model()(username=data.get("username", ""), email=self.initial.get("email", ""))
            try:
                password_validation.validate_password(data["password1"], user)
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return data
